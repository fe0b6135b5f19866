"""torchao's scale-only HQQ (the 4-bit weights' scale search of ExecuTorch's 8da4w recipe),
row block by row block: the same numbers, a fifth of the time.

torchao runs each of its up to 20 iterations as whole-tensor operations (divide, round,
clamp, two products, two sums, the update): for Gemma 3 270M's output matrix (262,144 x
640, 671 MB in float32) each operation streams the whole matrix through memory, and the
search took 24 s of the 8da4w capture, on the critical path of every language model's
8da4w export. Here each iteration goes over blocks of rows that stay in the CPU's cache,
with the same operations on each element in the same order: every output is a function
of its own row (the sums run over one group of 32 within a row), and the one thing that
is shared, the early stop, takes the largest relative change over all the blocks, as
torchao's over the whole tensor. ``tests/test_llm.py`` checks the outputs are equal
(``torch.equal``) to torchao's; bench/llm_export.py, the programs' bytes.
"""

from __future__ import annotations

from typing import Any

from ..patches.torchao_patches import scale_only_hqq_replaced

ROWS = 2048  # rows a block: 2048 x 640 floats are 5 MB, the output matrix 128 blocks


def scale_only_hqq(hp_tensor, block_size, qmin: int, qmax: int, *, iters: int = 20, stochastic: bool = False,
                   early_stop_tol: float = 1e-5, rows: int = ROWS):
    """``torchao.quantization.quant_primitives._choose_qparams_and_quantize_scale_only_hqq``,
    block by block of ``rows`` rows: (qdata int32 [out, in], scale [out, in // group])."""
    import torch
    from torchao.quantization import quant_primitives

    whole = quant_primitives._choose_qparams_and_quantize_scale_only_hqq
    if stochastic or hp_tensor.ndim != 2 or list(block_size)[:1] != [1] or hp_tensor.shape[1] % int(block_size[1]):
        return whole(hp_tensor, block_size, qmin, qmax, iters=iters, stochastic=stochastic,
                     early_stop_tol=early_stop_tol)  # what torchao refuses or draws at random: its own
    eps = torch.finfo(torch.float32).eps
    n, k = hp_tensor.shape
    size = int(block_size[1])
    weights = hp_tensor.to(torch.float32).contiguous().view(n, k // size, size)
    qabs = max(abs(qmin), abs(qmax)) or 1
    scale = (weights.abs().amax(dim=2) / qabs).clamp_min(eps)
    spans = [(a, min(a + rows, n)) for a in range(0, n, rows)]
    for _ in range(max(1, iters)):
        new = torch.empty_like(scale)
        change: Any = None  # the largest relative change: a tensor after the first span
        for a, b in spans:
            w, s = weights[a:b], scale[a:b]
            q = torch.div(w, s.unsqueeze(-1)).round_().clamp_(qmin, qmax)
            num = (w * q).sum(dim=2, dtype=torch.float32)
            den = q.mul_(q).sum(dim=2, dtype=torch.float32)
            fitted = torch.where(den > 0, num / den, s).clamp_min_(eps).abs_()
            new[a:b] = fitted
            most = (fitted - s).abs_().div_(s.clamp_min(eps)).max()
            change = most if change is None else torch.maximum(change, most)  # NaN stays NaN, as torchao's max
        scale, stop = new, bool(change < early_stop_tol)
        if stop:
            break
    qdata = torch.empty((n, k), dtype=torch.int32)
    for a, b in spans:
        qdata.view(n, k // size, size)[a:b] = torch.div(weights[a:b], scale[a:b].unsqueeze(-1)).round_().clamp_(qmin, qmax)
    return qdata, scale.to(hp_tensor.dtype)


def in_row_blocks():
    """Inside, torchao's intx weight quantization (``IntxWeightOnlyConfig`` and
    ``Int8DynamicActivationIntxWeightConfig`` with ``hqq_scale_only``) searches its scales
    with :func:`scale_only_hqq` (the patch: ``pteforge/patches/torchao_patches.py``)."""
    return scale_only_hqq_replaced(scale_only_hqq)
