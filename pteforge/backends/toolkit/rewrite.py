"""Same-value rewrites of a captured program into ops XNNPACK takes.

Each op XNNPACK does not take runs on the portable kernels and cuts the program
into one more delegate subgraph (with NCHW<->NHWC copies at its edges). These
rewrites write such ops as ops XNNPACK does take and compute the same values:
slices are copies, a permuted softmax reduces over the same elements, an
integer-scale nearest upsample is concatenated copies, a batched matmul is the
bmm it decomposes to anyway, LayerNorm is a mean, a subtraction and an rsqrt,
attention is two bmms around a last-dim softmax. Only the ops in the tables are
decomposed (the full default table would move max_pool2d out of XNNPACK), and
what depends only on constants is folded (``fold_constants``). Measured on
yolo11n with random weights, side by side in one process: 17 subgraphs -> 1, and
the portable softmax alone took 12 of 44 ms; on the zoo of bench/zoo.py every
fp32 program is one XNNPACK subgraph.
"""

from __future__ import annotations

import contextlib
import math
from math import prod
from typing import Any

from .splice import spliced, symbolic


def xnnpack_friendly(exported, late: bool = False):
    """The program with the ops in ``_table()`` written in ops XNNPACK takes (same values).

    ``late``: the rewrites that must wait until after quantization (``_late_table()``),
    applied just before lowering: the XNNPACK quantizer annotates adaptive_avg_pool2d by
    its source module and refuses any other op there, and a normalisation written out
    before quantization would compute its variance from int8 squares (DeiT-tiny int8:
    6.4 dB against eager); after it, those ops stay fp32 inside the XNNPACK program. So do
    LSTMs and GRUs, as their steps (``_recurrent_as_steps``).

    Static shapes only: the rewrites read sizes (slice bounds, scales, reshapes), and
    XNNPACK takes no symbolic reshape anyway. A program with symbolic sizes (a .pt2
    exported with dynamic shapes) is left as it is.
    """
    if not late:
        return _rewritten(exported, _table())
    rewritten = _rewritten(_recurrent_as_steps(exported), _late_table())
    if rewritten is not exported:
        _fold(rewritten)  # the averaging weights of _mean_last: a linear takes constant weights only
    return rewritten


def openvino_friendly(exported):
    """What OpenVINO's PyTorch frontend cannot convert, as what it can (same values):

    - adaptive average pooling as a mean or an average pool: ExecuTorch decomposes it
      into an as_strided copy ("Couldn't retrieve input stride info": ConvNeXt, Swin);
    - a maximum or minimum over the whole tensor (``x.amax()``, no dims) over every dim
      named: the frontend wants them ("Got less inputs 1 than expected 2");
    - reflection, replication and circular padding as slices and concatenations
      (``_pad``): it computed reflection padding wrong (a style-transfer network: 2.9 dB
      against eager)."""
    import torch

    ops = torch.ops.aten
    return _rewritten(exported, {ops.adaptive_avg_pool2d.default: _adaptive_avg_pool2d,
                                 ops.amax.default: _over_every_dim(ops.amax.default),
                                 ops.amin.default: _over_every_dim(ops.amin.default),
                                 ops.pad.default: _pad})


def coreml_friendly(exported):
    """What coremltools' PyTorch frontend refuses, as what it takes (same values): a clamp
    of float values to integer bounds (``F.hardtanh(x, -2, 2)``, ``x.clamp(0, 6)``) with
    float bounds; its ``clip`` wants bounds of the input's type ("alpha has dtype int32
    whereas x has dtype fp32": LOWER_FAILED)."""
    import torch

    ops = torch.ops.aten
    return _rewritten(exported, {ops.hardtanh.default: _float_bounds(ops.hardtanh.default),
                                 ops.clamp.default: _float_bounds(ops.clamp.default)})


def _float_bounds(op):
    def bounded(x, *bounds):
        if not x.is_floating_point() or not any(type(b) is int for b in bounds):
            return NotImplemented
        return op(x, *(float(b) if type(b) is int else b for b in bounds))

    return bounded


def _over_every_dim(op):
    def reduce(x, dim=(), keepdim=False):
        if list(dim) or x.dim() == 0:
            return NotImplemented
        return op(x, list(range(x.dim())), keepdim)

    return reduce


def video_as_frames(exported):
    """Every 3-D convolution and max pooling as 2-D ones over its frames (same values):
    ExecuTorch 1.5.1's portable convolution kernel takes 1-D and 2-D only (a video model
    failed at run time, "Expect input tensor to be 3-D or 4-D, but got, 5"), the pip
    runtime has no 3-D max pooling kernel, and XNNPACK has neither."""
    import torch

    ops = torch.ops.aten
    return _rewritten(exported, {ops.conv3d.default: _conv3d, ops.max_pool3d.default: _max_pool3d})


def with_kernels_for(exported, missing) -> object | None:
    """``exported`` with the operators whose kernels ``missing`` names (a program's kernels no
    ExecuTorch kernel library has) written in operators the portable library has, the same
    values; None when no rewrite here takes one of them.

    - ``sort`` (and ``argsort``, which is a ``sort``): ExecuTorch 1.5.1 has no ``sort``
      kernel, so a program sorting anywhere the delegate did not take it loaded on no
      runtime (a score ranking before a ``gather``: 9 of 12 targets ``LOWER_FAILED``).
      A sort is the top-k of all its elements, in order (``topk`` has a portable kernel):
      NaNs come last ascending and first descending in both. A stable sort's ties keep
      their order, which ``topk`` does not promise: it stays as it was."""
    import torch

    ops = torch.ops.aten
    table = {}
    if {"aten::sort.values", "aten::sort.values_stable"} & set(missing):
        table.update({ops.sort.default: _sort_as_topk, ops.sort.stable: _stable_sort_as_topk,
                      ops.argsort.default: _argsort_as_topk, ops.argsort.stable: _stable_argsort_as_topk})
    if not table:
        return None
    rewritten = _rewritten(exported, table)
    return None if rewritten is exported else rewritten


def _sort_as_topk(x, dim=-1, descending=False):
    if x.dim() == 0 or not isinstance(x.shape[dim], int):
        return NotImplemented
    import torch

    values, indices = torch.topk(x, x.shape[dim], dim, largest=descending, sorted=True)
    return values, indices


def _stable_sort_as_topk(x, *, stable=None, dim=-1, descending=False):
    return NotImplemented if stable else _sort_as_topk(x, dim, descending)


def _argsort_as_topk(x, dim=-1, descending=False):
    made = _sort_as_topk(x, dim, descending)
    return made if made is NotImplemented else made[1]


def _stable_argsort_as_topk(x, *, stable=False, dim=-1, descending=False):
    return NotImplemented if stable else _argsort_as_topk(x, dim, descending)


def means_as_linears(exported):
    """Every float mean over the last dim as a linear layer that averages it (same values),
    symbolic sizes allowed: a language model's RMSNorms (Gemma 3 270M: 109) each cut its
    XNNPACK program in two, the mean on the portable kernels between; XNNPACK's one mean
    wants a 4-D input and static sizes."""
    import torch

    if not any(n.target == torch.ops.aten.mean.dim for n in exported.graph.nodes):
        return exported
    from .decomposed import still_decomposed

    rewritten = exported.run_decompositions({torch.ops.aten.mean.dim: _mean_of_last_dim})
    _fold(rewritten)  # the averaging weights: XNNPACK's linear takes constant weights only
    return still_decomposed(rewritten)


def _mean_of_last_dim(x, dim, keepdim=False, dtype=None):
    dims = [dim] if isinstance(dim, int) else list(dim or ())
    if dtype is not None or not x.is_floating_point() or len(dims) != 1 or dims[0] % x.dim() != x.dim() - 1 \
            or not isinstance(x.shape[-1], int):
        return NotImplemented
    out = _mean_last(x, 1)
    return out if keepdim else out.squeeze(-1)


def _rewritten(exported, table):
    """``exported.run_decompositions(table)``, traced again only where ``table`` takes an op
    when it can be (``splice.py``): from the functional program ExecuTorch's lowering makes
    first anyway (``run_decompositions({})``, shared in a worker), then the ops it takes."""
    if symbolic(exported) or not _applies(exported, table):
        return exported
    if not _splices(exported, table):
        return exported.run_decompositions(table)
    from .decomposed import decomposed

    functional = exported.run_decompositions({})
    made = spliced(functional, table)
    # traced whole from ``exported``: functionalizing first decided its reshapes' views for
    # the layouts the rewrites then change (a ViT's attention, early table)
    return decomposed(made) if made is not None else exported.run_decompositions(table)


def _splices(exported, table) -> bool:
    """Whether functionalizing first and then splicing makes what tracing ``exported`` with
    ``table`` would: not where functionalizing would take an op of the table apart before
    the table sees it (a composite op that returns a view, such as ``chunk``) or turn an
    in-place op into one the table names, nor in a program with branches."""
    import torch
    from torch._export.utils import _is_cia_op, _is_preservable_cia_op

    if any(isinstance(sub, torch.fx.GraphModule) for sub in exported.graph_module.children()):
        return False
    names = {op._schema.name for op in table}
    for node in exported.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        if schema.is_mutable and schema.name.rstrip("_") in names:
            return False
        if node.target in table and _is_cia_op(node.target) and not _is_preservable_cia_op(node.target):
            return False
    return True


def _applies(exported, table) -> bool:
    """Whether a rewrite of ``table`` takes one of the program's ops, asked of each
    rewrite on the op's own fake values: one that declines returns NotImplemented at
    once. When every one declines, the program is already what ``run_decompositions``
    would make of it (the empty table's result, which lowering makes anyway), and
    re-tracing it is saved (~1 s on mobilenet_v3_small, whose convolutions XNNPACK takes
    as they are). A rewrite that takes an op, or fails on fake values, answers yes; so
    does an in-place op whose functional form is in the table. (Functionalizing replays
    the views of a mutated tensor with the arguments of views already asked about.)"""
    import torch
    from torch._guards import detect_fake_mode
    from torch.fx import Node
    from torch.utils import _pytree as pytree

    names = {op._schema.name for op in table}
    graphs = [m.graph for m in exported.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]  # and branches
    for node in (n for graph in graphs for n in graph.nodes):
        schema = getattr(node.target, "_schema", None)
        if schema is not None and schema.is_mutable and schema.name.rstrip("_") in names:
            return True  # functionalizing ``squeeze_`` makes a ``squeeze`` the table may take
        rewrite = table.get(node.target) if node.op == "call_function" else None
        if rewrite is None:
            continue
        args, kwargs = pytree.tree_map_only(Node, lambda a: a.meta.get("val"), (node.args, node.kwargs))
        mode = detect_fake_mode(pytree.tree_leaves((args, kwargs)))
        try:
            with mode or contextlib.nullcontext(), torch.no_grad():
                if rewrite(*args, **kwargs) is not NotImplemented:
                    return True
        except Exception:
            return True
    return False


def fold_constants():
    """An edge pass: what depends only on constants becomes a constant (same values).

    Decompositions lift scalars as int64 tensors cast at run time (mobilenet_v3's
    hardswish: 18 casts); Swin builds its shifted-window mask and relative-position
    bias, and text encoders their position ids and attention masks, from constants on
    every inference. XNNPACK takes none of those ops, so each ran on the portable
    kernels and cut the program into more subgraphs. Quantize/dequantize ops are never
    folded (their int8 weights must stay int8), and neither is a value more than
    ``_GROWTH`` times larger than the constants it is made from (past 1 MiB), so
    folding never swells the program (an expand of a weight stays an expand).
    """
    from executorch.exir.pass_base import (
        ExportedProgramPassBase,
        ExportedProgramPassResult,
    )

    class FoldConstants(ExportedProgramPassBase):
        def call(self, exported):
            return ExportedProgramPassResult(exported, _fold(exported))

    return FoldConstants()


_GROWTH = 4
_SMALL = 1 << 20


def _fold(exported) -> bool:
    import torch
    from executorch.exir.passes import constant_prop_pass as cp
    from torch.utils import _pytree as pytree

    if any(isinstance(sub, torch.fx.GraphModule) for sub in exported.graph_module.children()):
        # control flow (torch.cond, while_loop): a program with branches, folded, computed
        # wrong values (lowered for XNNPACK) or refused its input at run time (portable)
        return False
    # unlike ExecuTorch's default, `full` is folded too; aten or edge programs
    quant = {*cp._QUANT_PRIMITIVES_EDGE, *cp._QUANT_PRIMITIVES}
    consts = cp.get_constant_placeholder_dict(exported)
    placeholders = len(consts)
    for node in exported.graph.nodes:
        if (node.op != "call_function" or node.target in quant or node.is_impure()
                or not cp.is_const(node.args, exported, consts) or not cp.is_const(node.kwargs, exported, consts)):
            continue
        args, kwargs = pytree.tree_map(lambda a: cp.get_data(a, exported, consts), (node.args, node.kwargs))
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        if not isinstance(value, torch.Tensor):
            continue
        made_from = sum(t.nbytes for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor))
        if value.nbytes > _SMALL and value.nbytes > _GROWTH * made_from:
            continue
        # a tensor of its own: not a view of a parameter (which could not be deep-copied)
        consts[node] = value.detach().clone(memory_format=torch.contiguous_format)
    if len(consts) == placeholders:
        return False
    # ExecuTorch's constant_prop_pass, with the values found above
    specs = {s.arg.name: s for s in exported.graph_signature.input_specs}
    specs.update(cp.create_constant_nodes_and_return_specs(consts, exported))
    exported.graph_signature.input_specs = [specs[n.name] for n in exported.graph.find_nodes(op="placeholder")]
    cp._update_output_node_and_specs(exported, _skip_dim_order=True)
    exported.graph.eliminate_dead_code()
    exported.graph_module.recompile()
    return True


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
        ops.squeeze.default: _squeeze,
        ops.squeeze.dim: _squeeze,
        ops.squeeze.dims: _squeeze,
        ops.select.int: _select,
        ops.roll.default: _roll,
        ops.expand.default: _expand,
        ops.alias.default: _alias,
        ops.cat.default: _cat,
        ops.stack.default: _stack,
        ops.unbind.int: _unbind,
        ops.slice.Tensor: _slice,
        ops.mean.dim: _mean,
        ops.sum.dim_IntList: _sum,
        ops.max.dim: _max_dim,
        ops.amax.default: _amax,
        ops.gelu.default: _gelu,
        ops.scaled_dot_product_attention.default: _attention,
        ops.conv2d.default: _conv2d,
        ops.conv3d.default: _conv3d,
        ops.max_pool3d.default: _max_pool3d,
        ops.pad.default: _pad,
        ops.prelu.default: _prelu,
    }


def _late_table():
    import torch

    ops = torch.ops.aten
    return {
        ops.adaptive_avg_pool2d.default: _adaptive_avg_pool2d,
        # normalisations stay fp32 in a quantized program (an int8 x*x loses the variance)
        ops.layer_norm.default: _layer_norm,
        ops.rms_norm.default: _rms_norm,
        ops.instance_norm.default: _instance_norm,
        # what those are written in
        ops.mean.dim: _mean,
        ops.sum.dim_IntList: _sum,
    }


def _aten():
    import torch

    return torch.ops.aten


def _recurrent_as_steps(exported):
    """LSTM and GRU as their steps, with the chunks and steps they are written in as the
    slices and views of ``_table()``, after quantization (their weights stay fp32, as they
    did on the portable kernels: ddddocr's int8 recognizer, its LSTM quantized step by step,
    fell from 18.6 to -5.2 dB). Decomposed at lowering instead, each step's chunk ran on the
    portable kernels and cut the program there (ddddocr's bidirectional LSTM: 23 XNNPACK
    programs; now one). The steps are pteforge's own (``_recurrent_steps``), not PyTorch's
    decomposition: a CRNN's BiLSTM was 2 XNNPACK programs with it (its reversed direction's
    ``flip``), and a step had a sigmoid or tanh per gate."""
    import torch

    ops = torch.ops.aten
    recurrent = {ops.lstm.input, ops.gru.input}
    if not any(n.target in recurrent for n in exported.graph.nodes):
        return exported
    views = {ops.split_with_sizes.default, ops.split.Tensor, ops.chunk.default, ops.unbind.int, ops.select.int,
             ops.squeeze.default, ops.squeeze.dim, ops.squeeze.dims, ops.unsqueeze.default, ops.stack.default,
             ops.cat.default, ops.alias.default, ops.slice.Tensor}
    table = {op: rewrite for op, rewrite in _table().items() if op in views}
    if symbolic(exported):
        return exported
    # the program holds one: asking each rewrite first (``_applies``) would run every step on fake values
    return exported.run_decompositions({**table, **{op: _recurrent(op) for op in recurrent}})


def _recurrent(op):
    """LSTM or GRU ``op`` as its steps, for static shapes (``_recurrent_steps``); what that
    does not cover (projections, training dropout, an unbatched input) as PyTorch's own
    decomposition."""
    from torch._decomp import decomposition_table

    decompose = decomposition_table[op]
    lstm = op is _aten().lstm.input

    def steps(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        if not _static(x.shape):
            return NotImplemented
        dirs = 2 if bidirectional else 1
        if x.dim() != 3 or len(params) != num_layers * dirs * (4 if has_biases else 2) or (train and dropout):
            return decompose(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        states = list(hx) if lstm else [hx]
        out, finals = _recurrent_steps(x, states, list(params), has_biases, num_layers, dirs, batch_first, lstm)
        return (out, *finals)

    return steps


def _recurrent_steps(x, states, params, has_biases, num_layers, dirs, batch_first, lstm):
    """An LSTM's or GRU's output and final states, written so that XNNPACK runs them fast
    (the same values as PyTorch's up to float rounding): per layer and direction, every
    step's input projection is one linear over all steps with both biases folded in, and
    each step one linear of the hidden state with a constant weight, its gates reordered
    (LSTM: i, f, o, g) so one sigmoid and one tanh cover them. XNNPACK still packs that
    weight once per step's node (no weights cache in ExecuTorch 1.5.1's runtime by default):
    see docs/performance.md, "Recurrent layers"."""
    batch = x.shape[0] if batch_first else x.shape[1]
    x = _seq_first(x, batch_first, batch)  # [T, B, I]
    per = 4 if has_biases else 2
    finals: list[list] = [[] for _ in states]
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            k = layer * dirs + d
            first = [_row(s, k) for s in states]
            out, last = _direction(x, first, params[k * per:(k + 1) * per], d == 1, lstm)
            outs.append(out)
            for kept, value in zip(finals, last):
                kept.append(value)
        x = outs[0] if dirs == 1 else _aten().cat.default(outs, 2)
    stacked = [_aten().cat.default(kept, 0) if len(kept) > 1 else kept[0] for kept in finals]
    stacked = [s.reshape(len(kept), *kept[0].shape) for s, kept in zip(stacked, finals)]
    return _seq_first(x, batch_first, batch), stacked


def _seq_first(x, swap, batch):
    """[B, T, ...] as [T, B, ...] and back; a reshape at batch 1."""
    if not swap:
        return x
    if batch == 1:
        return x.reshape(x.shape[1], x.shape[0], *x.shape[2:])
    return x.transpose(0, 1).contiguous()


def _row(states, k):
    """states[k] of [L*D, B, H] as [B, H] (a slice and a reshape, which XNNPACK takes)."""
    return _aten().slice.Tensor(states, 0, k, k + 1).reshape(states.shape[1:])


def _direction(x, first, params, reverse, lstm):
    """One layer's one direction over x ([T, B, I]): its output [T, B, H] and final states."""
    aten = _aten()
    steps, batch, size = x.shape
    w_ih, w_hh = params[0], params[1]
    b_ih, b_hh = (params[2], params[3]) if len(params) == 4 else (None, None)
    hidden = w_hh.shape[1]
    w_ih, w_hh, b_in, b_rec = (_lstm_weights if lstm else _gru_weights)(w_ih, w_hh, b_ih, b_hh, hidden)
    projected = aten.linear.default(x.reshape(steps * batch, size), w_ih, b_in)  # every step at once
    state = first
    out: list[Any] = [None] * steps  # each step's output tensor, once made
    for t in reversed(range(steps)) if reverse else range(steps):
        g = aten.slice.Tensor(projected, 0, t * batch, (t + 1) * batch)
        state = (_lstm_step if lstm else _gru_step)(g, state, w_hh, b_rec, hidden)
        out[t] = state[0]
    seq = aten.cat.default(out, 0) if steps > 1 else out[0]
    return seq.reshape(steps, batch, hidden), state


def _gates(w, order, hidden):
    """Rows of a stacked gate weight (or bias) in another gate order."""
    if w is None:
        return None
    return _aten().cat.default([_aten().slice.Tensor(w, 0, g * hidden, (g + 1) * hidden) for g in order], 0)


def _lstm_weights(w_ih, w_hh, b_ih, b_hh, hidden):
    """PyTorch's i, f, g, o gates as i, f, o, g (sigmoids first); both biases in the input
    projection. What depends only on weights is folded into constants before lowering."""
    order = (0, 1, 3, 2)
    bias = None if b_ih is None else _gates(b_ih + b_hh, order, hidden)
    return _gates(w_ih, order, hidden), _gates(w_hh, order, hidden), bias, None


def _lstm_step(g, state, w_hh, _bias, hidden):
    aten = _aten()
    h, c = state
    z = aten.add.Tensor(g, aten.linear.default(h, w_hh))
    s = aten.sigmoid.default(aten.slice.Tensor(z, 1, 0, 3 * hidden))
    cell = aten.tanh.default(aten.slice.Tensor(z, 1, 3 * hidden, 4 * hidden))
    gate = [aten.slice.Tensor(s, 1, i * hidden, (i + 1) * hidden) for i in range(3)]
    c = aten.add.Tensor(aten.mul.Tensor(gate[1], c), aten.mul.Tensor(gate[0], cell))
    return aten.mul.Tensor(gate[2], aten.tanh.default(c)), c


def _gru_weights(w_ih, w_hh, b_ih, b_hh, hidden):
    """The reset and update gates' recurrent biases join the input projection's; the new
    gate's stays in the recurrent linear (PyTorch applies the reset gate after it)."""
    if b_ih is None:
        return w_ih, w_hh, None, None
    aten = _aten()
    head, tail = aten.slice.Tensor(b_hh, 0, 0, 2 * hidden), aten.slice.Tensor(b_hh, 0, 2 * hidden, 3 * hidden)
    b_in = aten.add.Tensor(b_ih, aten.cat.default([head, aten.mul.Tensor(tail, 0.0)], 0))
    return w_ih, w_hh, b_in, aten.cat.default([aten.mul.Tensor(head, 0.0), tail], 0)


def _gru_step(g, state, w_hh, b_rec, hidden):
    aten = _aten()
    (h,) = state
    r = aten.linear.default(h, w_hh, b_rec)
    rz = aten.sigmoid.default(aten.add.Tensor(aten.slice.Tensor(g, 1, 0, 2 * hidden),
                                              aten.slice.Tensor(r, 1, 0, 2 * hidden)))
    reset, update = aten.slice.Tensor(rz, 1, 0, hidden), aten.slice.Tensor(rz, 1, hidden, 2 * hidden)
    n = aten.tanh.default(aten.add.Tensor(aten.slice.Tensor(g, 1, 2 * hidden, 3 * hidden),
                                          aten.mul.Tensor(reset, aten.slice.Tensor(r, 1, 2 * hidden, 3 * hidden))))
    return (aten.add.Tensor(n, aten.mul.Tensor(update, aten.sub.Tensor(h, n))),)


def _prelu(x, weight):
    """PReLU of a tensor that is not 4-D (after a linear layer: MTCNN's R-Net and O-Net;
    after a 1-D convolution) as relu(x) - w·relu(-x): XNNPACK's channels-last pass takes
    PReLU for an image operator and crashed converting its input ("Attempting to convert
    non-NHWC compatible node to NHWC"). A 4-D one XNNPACK takes as it is."""
    if x.dim() == 4:
        return NotImplemented
    aten = _aten()
    if weight.numel() > 1 and x.dim() >= 2:  # one slope per channel, the channels at dim 1
        weight = aten.reshape.default(weight, [1, -1] + [1] * (x.dim() - 2))
    return aten.sub.Tensor(aten.relu.default(x), aten.mul.Tensor(weight, aten.relu.default(aten.neg.default(x))))


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


def _static(*shapes) -> bool:
    return all(isinstance(d, int) for shape in shapes for d in shape)


def _squeeze(x, dim=None):
    """squeeze as the reshape it is (XNNPACK takes reshapes, not squeeze_copy)."""
    dims = range(x.dim()) if dim is None else [dim] if isinstance(dim, int) else dim
    drop = {d % max(x.dim(), 1) for d in dims if x.shape[d] == 1}
    return x.reshape([s for i, s in enumerate(x.shape) if i not in drop])


def _select(x, dim, index):
    """x[..., i, ...] as a one-wide slice and a reshape (XNNPACK takes both)."""
    d = dim % x.dim()
    i = index % x.shape[d]
    out = _aten().slice.Tensor(x, d, i, i + 1)
    return out.reshape([s for j, s in enumerate(x.shape) if j != d])


def _roll(x, shifts, dims=()):
    """roll as two slices concatenated per dim (Swin's shifted windows)."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims or len(dims) != len(shifts):
        return NotImplemented  # a roll of the flattened tensor
    for shift, dim in zip(shifts, dims):
        d = dim % x.dim()
        n = x.shape[d]
        s = shift % n
        if s:
            x = _aten().cat.default([_aten().slice.Tensor(x, d, n - s, n), _aten().slice.Tensor(x, d, 0, n - s)], d)
    return x


def _expand(x, size, implicit=False):
    """An expand to the size x already has is x itself (a class token at batch 1)."""
    if len(size) != x.dim() or any(s not in (-1, n) for s, n in zip(size, x.shape)):
        return NotImplemented
    return x


def _alias(x):
    """An alias is its input (XNNPACK takes no alias_copy)."""
    return x


def _cat(tensors, dim=0):
    """A concatenation of one tensor as its copy: XNNPACK takes two or more (a one-layer
    GRU's final state is ``stack([h])``)."""
    if len(tensors) != 1:
        return NotImplemented
    return _aten().clone.default(tensors[0])


def _stack(tensors, dim=0):
    """A stack of one tensor as its view with one more dim (lowering made it a concatenation
    of one tensor, which XNNPACK refuses)."""
    if len(tensors) != 1:
        return NotImplemented
    return _unsqueeze(tensors[0], dim)


def _unbind(x, dim=0):
    return [_select(x, dim, i) for i in range(x.shape[dim])]


def _slice(x, dim=0, start=None, end=None, step=1):
    """A strided slice (``x[..., 1::2, ...]``, Swin's patch merging) as a reshape that puts
    the stride in a dim of its own, a one-wide slice of it and a reshape back."""
    if step == 1 or not _static(x.shape):
        return NotImplemented
    d = dim % x.dim()
    size = x.shape[d]
    first, stop, _ = slice(start, end, step).indices(size)
    count = len(range(first, stop, step))
    if count == 0:
        return NotImplemented
    padded = -(-size // step) * step
    if padded != size:  # zeros that no index reaches, so the stride can be a dim
        x = _aten().constant_pad_nd.default(x, [0, 0] * (x.dim() - 1 - d) + [0, padded - size])
    shape = list(x.shape)
    y = x.reshape(*shape[:d], padded // step, step, *shape[d + 1:])
    y = _aten().slice.Tensor(y, d + 1, first % step, first % step + 1)
    y = _aten().slice.Tensor(y, d, first // step, first // step + count)
    return y.reshape(*shape[:d], count, *shape[d + 1:])


_DW_TAPS = 25  # XNNPACK's largest one-pass depthwise kernel: 25 taps (5x5, 3x7, ...)


def _conv2d(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    """A depthwise convolution of more than 25 taps (ConvNeXt's 7x7) as the sum of the
    depthwise convolutions of its bands of rows (3x7, 3x7, 1x7), each output shifted by
    its band's first row.

    XNNPACK in ExecuTorch 1.5.1 runs a depthwise convolution of more than 25 taps as a
    grouped GEMM with one channel per group (ETDump: convnext_atto spent 21 of 34 ms
    there, slower than eager); up to 25 taps it takes its depthwise kernels. Each band
    pads like the whole kernel, so no pad op (XNNPACK refuses an int8 pad whose input
    and output scales differ), and its shift is a slice of whole rows.
    """
    kh, kw = weight.shape[-2:]
    if (groups == 1 or groups != x.shape[1] or kh * kw <= _DW_TAPS or kw > _DW_TAPS or x.dim() != 4
            or isinstance(padding, str) or tuple(stride) != (1, 1) or tuple(dilation) != (1, 1)
            or not _static(x.shape)):
        return NotImplemented
    rows = _DW_TAPS // kw
    oh = x.shape[2] + 2 * padding[0] - kh + 1
    out = None
    for i in range(0, kh, rows):
        band = _aten().conv2d.default(x, weight[:, :, i:i + rows], None, [1, 1], list(padding), [1, 1], groups)
        band = band[:, :, i:i + oh]
        out = band if out is None else out + band
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def _conv3d(x, weight, bias=None, stride=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1):
    """A 3-D convolution as the sum over its kernel's frames of 2-D convolutions: frame
    ``i`` of the kernel convolves the input frames it meets (every ``stride``-th from
    ``i * dilation``, time padded with zero frames), all output times at once with time
    folded into the batch."""
    if x.dim() != 5 or isinstance(padding, str) or not _static(x.shape):
        return NotImplemented
    aten = _aten()
    (st, sh, sw), (pt, ph, pw), (dt, dh, dw) = (_triple(v) for v in (stride, padding, dilation))
    if pt:
        x = aten.constant_pad_nd.default(x, [0, 0, 0, 0, pt, pt])
    n, c, t = x.shape[:3]
    kt = weight.shape[2]
    frames = (t - dt * (kt - 1) - 1) // st + 1
    out: Any = None  # the sum of the kernel's slices: a tensor after the first (kt >= 1)
    for i in range(kt):
        seen = aten.slice.Tensor(x, 2, i * dt, i * dt + st * (frames - 1) + 1, st)  # N, C, frames, H, W
        seen = seen.permute(0, 2, 1, 3, 4).reshape(n * frames, c, *x.shape[3:])
        y = aten.conv2d.default(seen, weight[:, :, i], None, [sh, sw], [ph, pw], [dh, dw], groups)
        out = y if out is None else out + y
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out.reshape(n, frames, *out.shape[1:]).permute(0, 2, 1, 3, 4)


def _max_pool3d(x, kernel_size, stride=(), padding=(0, 0, 0), dilation=(1, 1, 1), ceil_mode=False):
    """A 3-D max pooling as a 2-D one per frame (time folded into the batch), then the
    maximum over each window of frames (time padded with -inf frames)."""
    (kt, kh, kw), (pt, ph, pw) = _triple(kernel_size), _triple(padding)
    st, sh, sw = _triple(stride) if stride else (kt, kh, kw)
    if x.dim() != 5 or ceil_mode or _triple(dilation) != (1, 1, 1) or not _static(x.shape):
        return NotImplemented
    aten = _aten()
    n, c, t = x.shape[:3]
    frames = aten.max_pool2d.default(x.permute(0, 2, 1, 3, 4).reshape(n * t, c, *x.shape[3:]),
                                     [kh, kw], [sh, sw], [ph, pw])
    y = frames.reshape(n, t, *frames.shape[1:]).permute(0, 2, 1, 3, 4)  # N, C, T, H', W'
    if pt:
        y = aten.constant_pad_nd.default(y, [0, 0, 0, 0, pt, pt], float("-inf"))
    count = (y.shape[2] - kt) // st + 1
    out = None
    for i in range(kt):
        window = aten.slice.Tensor(y, 2, i, i + st * (count - 1) + 1, st)
        out = window if out is None else aten.maximum.default(out, window)
    return out


def _triple(v) -> tuple:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v * 3 if len(v) == 1 else v)


def _adaptive_avg_pool2d(x, output_size):
    """Adaptive average pooling whose windows tile the input exactly: a global mean (1x1)
    or an average pooling (ExecuTorch decomposes it into an as_strided copy XNNPACK
    does not take)."""
    if x.dim() != 4 or not _static(x.shape):
        return NotImplemented
    h, w = x.shape[-2:]
    oh, ow = (output_size[0] or h), (output_size[1] or w)
    if (oh, ow) == (1, 1):
        return _aten().mean.dim(x, [2, 3], True)
    if h % oh or w % ow:
        return NotImplemented
    return _aten().avg_pool2d.default(x, [h // oh, w // ow], [h // oh, w // ow])


def _mean(x, dim, keepdim=False, dtype=None):
    """A mean over any dims as the one mean XNNPACK takes: a 4-D mean over dims 2 and 3.

    The reduced dims are moved last (a permute, when they are not already), the tensor
    is viewed as (1, kept, reduced, 1), averaged over its last two dims and viewed back.
    """
    if dtype is not None or not x.is_floating_point() or not _static(x.shape):
        return NotImplemented
    n = x.dim()
    dims = _dims(x, dim)
    if n == 4 and dims == [2, 3] and keepdim:
        return NotImplemented  # XNNPACK takes it as it is
    kept = [d for d in range(n) if d not in dims]
    shape = [1 if d in dims else s for d, s in enumerate(x.shape)]
    if kept + dims != list(range(n)):
        x = _aten().permute.default(x, kept + dims)
    reduced = prod(x.shape[len(kept):])
    out = _aten().mean.dim(x.reshape(1, x.numel() // reduced, reduced, 1), [2, 3], True)
    return out.reshape(shape if keepdim else [shape[d] for d in kept])


def _max_dim(x, dim, keepdim=False):
    """A maximum over one dim, and its index, the way XNNPACK computes them: over dim 2 or
    3 of a 4-D tensor, keeping it. XNNPACK's partitioner takes ``max.dim`` and ``amax``
    over any dim, and then its lowering refuses them ("amax.default only supports
    keep_dim == True", "only supports dim == 2 or dim == 3": CBAM's channel maximum
    failed to lower); elsewhere the dim is moved last in a (1, 1, rest, dim) view. (It
    takes the values only: where the indices are used the maximum stays on the portable
    kernels.)"""
    if not x.dim() or not _static(x.shape):
        return NotImplemented
    d = dim % x.dim()
    if x.dim() == 4 and d in (2, 3):
        if keepdim:
            return NotImplemented  # XNNPACK takes it as it is
        values, indices = _aten().max.dim(x, d, True)
    else:
        values, indices = _aten().max.dim(_reduced_last(x, [d]), 3, True)
    shape = [1 if i == d else s for i, s in enumerate(x.shape) if keepdim or i != d]
    return values.reshape(shape), indices.reshape(shape)


def _amax(x, dim=(), keepdim=False):
    """A maximum over dims (see ``_max_dim``; XNNPACK takes ``max.dim``'s values, not
    ``amax``), over every dim when none is named."""
    if not x.dim() or not _static(x.shape):
        return NotImplemented
    dims = _dims(x, dim)
    if x.dim() == 4 and len(dims) == 1 and dims[0] in (2, 3):
        values = _aten().max.dim(x, dims[0], True)[0]
    else:
        values = _aten().max.dim(_reduced_last(x, dims), 3, True)[0]
    return values.reshape([1 if i in dims else s for i, s in enumerate(x.shape) if keepdim or i not in dims])


def _dims(x, dim) -> list[int]:
    """A reduction's dims, sorted and non-negative: every dim when none is named."""
    return sorted({d % x.dim() for d in ([dim] if isinstance(dim, int) else dim or range(x.dim()))})


def _reduced_last(x, dims):
    """``x`` viewed as (1, 1, the other dims' elements, the ``dims``' elements)."""
    kept = [i for i in range(x.dim()) if i not in dims]
    moved = x.permute(kept + list(dims)) if kept + list(dims) != list(range(x.dim())) else x
    return moved.reshape(1, 1, prod(x.shape[i] for i in kept), prod(x.shape[i] for i in dims))


def _sum(x, dim, keepdim=False, dtype=None):
    """A float sum is the mean times the count (XNNPACK has a mean, not a sum)."""
    if dtype is not None or not x.is_floating_point() or dim is None or not _static(x.shape):
        return NotImplemented
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return NotImplemented
    count = prod(x.shape[d] for d in dims)
    return _aten().mean.dim(x, dims, keepdim) * count


def _normalize(x, k, eps, centre):
    """(x - mean) / sqrt(var + eps) over the last k dims, in ops XNNPACK takes."""
    if centre:
        x = x - _mean_last(x, k)
    return x * _aten().rsqrt.default(_mean_last(x * x, k) + eps)


def _mean_last(x, k):
    """The mean over the last k dims (kept) as a linear layer whose one output averages them.

    A mean over the innermost dims in XNNPACK's one mean (over dims 2-3 of a 4-D tensor,
    computed channels-last) needs a full transpose of its input first: two per
    LayerNorm. A fully-connected layer reads them in place; its weight, a constant,
    is folded into the program.
    """
    import torch

    lead, reduced = list(x.shape[:x.dim() - k]), prod(x.shape[x.dim() - k:])
    weight = torch.full((1, reduced), 1.0 / reduced, dtype=x.dtype, device=x.device)
    flat = x if k == 1 else x.reshape(*lead, reduced)
    out = _aten().linear.default(flat, weight)
    return out if k == 1 else out.reshape(*lead, *[1] * k)


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    """LayerNorm as mean, subtract, multiply and rsqrt (XNNPACK has no LayerNorm)."""
    if not x.is_floating_point() or not _static(x.shape):
        return NotImplemented
    y = _normalize(x, len(normalized_shape), eps, centre=True)
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def _rms_norm(x, normalized_shape, weight=None, eps=None):
    """RMSNorm as mean, multiply and rsqrt (LLM blocks)."""
    import torch

    if not x.is_floating_point() or not _static(x.shape):
        return NotImplemented
    y = _normalize(x, len(normalized_shape), torch.finfo(x.dtype).eps if eps is None else eps, centre=False)
    return y * weight if weight is not None else y


def _instance_norm(x, weight=None, bias=None, running_mean=None, running_var=None, use_input_stats=True,
                   momentum=0.1, eps=1e-5, cudnn_enabled=True):
    """InstanceNorm over an image's height and width as means, a subtraction and an rsqrt:
    ExecuTorch lowers it to a batch norm without statistics that XNNPACK does not take,
    one portable kernel and two more subgraph edges per layer (a style-transfer network:
    9). The means are XNNPACK's own, over dims 2 and 3 of a 4-D tensor."""
    if not use_input_stats or x.dim() != 4 or not x.is_floating_point() or not _static(x.shape):
        return NotImplemented
    ops = _aten()
    centred = x - ops.mean.dim(x, [2, 3], True)
    y = centred * ops.rsqrt.default(ops.mean.dim(centred * centred, [2, 3], True) + eps)
    if weight is not None:
        y = y * weight.reshape(1, -1, 1, 1)
    return y + bias.reshape(1, -1, 1, 1) if bias is not None else y


def _pad(x, pad, mode="constant", value=None):
    """Reflection, replication and circular padding as one-wide slices and a
    concatenation per padded dim. XNNPACK pads with a constant only, and ExecuTorch
    decomposes the others into index gathers on the portable kernels (a style-transfer
    network: 20 of them, a quarter of its run time)."""
    if mode not in ("reflect", "replicate", "circular") or not _static(x.shape) or any(p < 0 for p in pad):
        return NotImplemented
    for i in range(len(pad) // 2):
        before, after = pad[2 * i], pad[2 * i + 1]
        if before or after:
            x = _padded(x, x.dim() - 1 - i, before, after, mode)
    return x


def _padded(x, dim, before, after, mode):
    ops, n = _aten(), x.shape[dim]

    def cut(start, stop):
        return ops.slice.Tensor(x, dim, start, stop)

    if mode == "reflect":  # the edge itself is not repeated: a b c | b a
        left = [cut(i, i + 1) for i in range(before, 0, -1)]
        right = [cut(n - 1 - i, n - i) for i in range(1, after + 1)]
    elif mode == "replicate":
        left, right = [cut(0, 1)] * before, [cut(n - 1, n)] * after
    else:  # circular
        left, right = [cut(n - before, n)] if before else [], [cut(0, after)] if after else []
    return ops.cat.default([*left, x, *right], dim)


def _gelu(x, approximate="none"):
    """GELU's tanh approximation written out.

    ExecuTorch 1.5.1's XNNPACK delegate serializes every aten.gelu as XNNPACK's exact
    (erf) GELU and ignores ``approximate``, so a tanh-GELU model (GPT-2, Gemma, ...)
    would compute another function. The formula uses ops XNNPACK takes.
    """
    if approximate != "tanh":
        return NotImplemented
    inner = (x + x * x * x * 0.044715) * 0.7978845608028654  # sqrt(2 / pi)
    return x * 0.5 * (_aten().tanh.default(inner) + 1)


def _attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """scaled_dot_product_attention as bmm, softmax over the last dim and bmm.

    torch's own decomposition leaves expand copies and a "safe" softmax (any, where,
    logical_not) on the portable kernels. Rows that a mask hides entirely come out as
    zeros, as torch's: masked scores get the dtype's lowest value (exp underflows to 0
    exactly as for -inf) and such rows are multiplied by 0. With a mask that is a
    constant (a text encoder without an attention mask input) that factor folds away.
    """
    import torch

    batch, (seq_q, e), (seq_k, ev) = q.shape[:-2], q.shape[-2:], v.shape[-2:]
    if dropout_p or enable_gqa or k.shape[:-2] != batch or v.shape[:-2] != batch or not _static(q.shape, k.shape, v.shape):
        return NotImplemented
    scale = 1.0 / math.sqrt(e) if scale is None else scale
    lowest = torch.finfo(q.dtype).min
    scores = _aten().bmm.default((q * scale).reshape(-1, seq_q, e), k.reshape(-1, seq_k, e).transpose(1, 2))
    scores = scores.reshape(*batch, seq_q, seq_k)
    visible = None
    if is_causal:
        attn_mask = torch.ones(seq_q, seq_k, dtype=torch.bool).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        visible = attn_mask
        attn_mask = _aten().where.self(attn_mask, torch.zeros((), dtype=q.dtype), torch.full((), lowest, dtype=q.dtype))
    elif attn_mask is not None:
        visible = attn_mask != float("-inf")
        attn_mask = attn_mask.clamp(min=lowest)
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = _aten().softmax.int(scores, -1)
    out = _aten().bmm.default(weights.reshape(-1, seq_q, seq_k), v.reshape(-1, seq_k, ev)).reshape(*batch, seq_q, ev)
    if visible is not None and not is_causal:
        out = out * visible.any(-1, keepdim=True).to(q.dtype)
    return out
