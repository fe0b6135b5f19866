"""Same-value rewrites of a captured program into ops XNNPACK takes.

Each op XNNPACK does not take runs on the portable kernels and cuts the program
into one more delegate subgraph (with NCHW<->NHWC copies at its edges). These
rewrites write such ops as ops XNNPACK does take and compute the same values:
slices are copies, a permuted softmax reduces over the same elements, an
integer-scale nearest upsample is concatenated copies, a batched matmul is the
bmm it decomposes to anyway. Only the ops in the table are decomposed (the full
default table would move max_pool2d out of XNNPACK). Measured on yolo11n with
random weights, side by side in one process: 17 subgraphs -> 1, and the
portable softmax alone took 12 of 44 ms.
"""

from __future__ import annotations


def xnnpack_friendly(exported):
    """The program with the ops in ``_table()`` written in ops XNNPACK takes (same values).

    Static shapes only: the rewrites read sizes (slice bounds, scales, reshapes), and
    XNNPACK takes no symbolic reshape anyway. A program with symbolic sizes (a .pt2
    exported with dynamic shapes) is left as it is.
    """
    table = _table()
    if not any(n.target in table for n in exported.graph.nodes) or _symbolic(exported):
        return exported
    return exported.run_decompositions(table)


def _symbolic(exported) -> bool:
    import torch

    return any(
        isinstance(d, torch.SymInt)
        for n in exported.graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
        for d in n.meta["val"].shape
    )


def fold_constant_casts():
    """An edge pass: dtype casts of constants become constants (same values).

    Decompositions lift scalars as int64 tensors and cast them to float at run time
    (mobilenet_v3's hardswish: 18 casts). XNNPACK takes no int64, so each cast
    stayed on the portable kernels, run on every inference.
    """
    from executorch.exir.dialects._ops import ops as exir_ops
    from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
    from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    cast = exir_ops.edge.dim_order_ops._to_dim_order_copy.default

    class FoldConstantCasts(ExportedProgramPassBase):
        def call(self, exported):
            targets = {n.target for n in exported.graph.nodes if n.op == "call_function"}
            if cast not in targets:
                return ExportedProgramPassResult(exported, False)
            # constant propagation of the casts alone: every other op is skipped
            return ExportedProgramPassResult(constant_prop_pass(exported, custom_skip_targets=targets - {cast}), True)

    return FoldConstantCasts()


def _table():
    import torch

    ops = torch.ops.aten
    return {
        ops.split_with_sizes.default: _split_with_sizes,
        ops.split.Tensor: _split,
        ops.chunk.default: _chunk,
        ops.softmax.int: _softmax,
        ops.upsample_nearest2d.vec: _upsample_nearest2d,
        ops.matmul.default: _matmul,
        ops.unsqueeze.default: _unsqueeze,
    }


def _aten():
    import torch

    return torch.ops.aten


def _split_with_sizes(x, sizes, dim=0):
    out, start = [], 0
    for size in sizes:
        out.append(_aten().slice.Tensor(x, dim, start, start + size))
        start += size
    return out


def _split(x, size, dim=0):
    n = x.shape[dim]
    return _split_with_sizes(x, [min(size, n - i) for i in range(0, n, size)], dim)


def _chunk(x, chunks, dim=0):
    return _split(x, -(-x.shape[dim] // chunks), dim)


def _softmax(x, dim, dtype=None):
    """XNNPACK's softmax reduces over the last dim only: swap ``dim`` there and back."""
    d = dim % x.dim()
    if d == x.dim() - 1:
        return NotImplemented  # XNNPACK takes it as it is
    perm = list(range(x.dim()))
    perm[d], perm[-1] = perm[-1], perm[d]
    return _aten().softmax.int(_aten().permute.default(x, perm), -1, dtype).permute(perm)


def _upsample_nearest2d(x, output_size=None, scale_factors=None):
    """Integer-scale nearest upsampling as copies concatenated on new trailing dims."""
    if x.dim() != 4:
        return NotImplemented
    n, c, h, w = x.shape
    if output_size is None:
        output_size = [int(h * scale_factors[0]), int(w * scale_factors[1])]
    oh, ow = output_size
    if oh % h or ow % w:
        return NotImplemented
    y = x
    # one reshape node per copy: XNNPACK's cat counts distinct inputs
    if ow > w:
        y = _aten().cat.default([y.reshape(n, c, h, w, 1) for _ in range(ow // w)], -1).reshape(n, c, h, ow)
    if oh > h:
        y = _aten().cat.default([y.reshape(n, c, h, 1, ow) for _ in range(oh // h)], 3).reshape(n, c, oh, ow)
    return y


def _matmul(a, b):
    """Batched matmul with equal batch dims as bmm (no broadcasting expand_copy left outside)."""
    if a.dim() < 3 or a.dim() != b.dim() or a.shape[:-2] != b.shape[:-2]:
        return NotImplemented
    out = _aten().bmm.default(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.reshape(*a.shape[:-2], a.shape[-2], b.shape[-1])


def _unsqueeze(x, dim):
    """XNNPACK takes unsqueeze on the trailing dim only; elsewhere it is a reshape."""
    d = dim % (x.dim() + 1)
    if d == x.dim():
        return NotImplemented
    return x.reshape(*x.shape[:d], 1, *x.shape[d:])
