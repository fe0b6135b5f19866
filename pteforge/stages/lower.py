"""Lower an ExportedProgram through a backend chain and read back what happened."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import re
from collections import Counter
from collections.abc import Set as AbstractSet

from ..backends.base import chain_precisions
from ..core.result import Delegation, OpCount
from ..patches.executorch_patches import (
    partitions_merged_by_set_checks,
    partitions_sorted_in_place,
    partitions_without_debug_text,
    retrace_only_what_changed,
    retraces_reuse_values,
    traced_arguments_read_directly,
)
from ..patches.torch_patches import (
    cached_quant_ops,
    cia_ops_materialized_once,
    custom_class_checks_by_type,
    fast_serde,
    lazy_codegen,
    py_kernels_registered_without_annotations,
    shared_provenance,
    signature_maps_kept,
)
from ..patches.torchao_patches import histogram_search_on_floats
from .fallback import Cut, lower_leaving_out
from .memo import sharing


# The patches (``pteforge/patches``) and ``memo.sharing`` every target job runs under, in the
# order entered: ``retraces_reuse_values`` wraps the pass base's ``_fx`` that
# ``traced_arguments_read_directly`` put in place.
FAST_FX = (shared_provenance, lazy_codegen, cached_quant_ops, cia_ops_materialized_once, custom_class_checks_by_type,
           signature_maps_kept, py_kernels_registered_without_annotations, retrace_only_what_changed,
           traced_arguments_read_directly, retraces_reuse_values, partitions_without_debug_text,
           partitions_sorted_in_place, partitions_merged_by_set_checks, sharing, fast_serde, histogram_search_on_floats)


@contextlib.contextmanager
def fast_fx():
    """Every patch of ``FAST_FX``: what every target job (loading its capture, quantizing and
    lowering it) runs under."""
    with contextlib.ExitStack() as stack:
        for patch in FAST_FX:
            stack.enter_context(patch())
        yield


def lower(exported, chain, precision, plan, fallback: bool = True):
    """Lower with the chain's partitioners in priority order; return the edge program manager.

    The first backend drives lowering (its plan: edge config, passes, its special
    flow if any); the partitioners of the others follow it: what the first cannot
    take goes to the next, and what none takes stays on the portable kernels. A
    later backend that does not take the target's precision lowers at its default.

    A partitioner keeps the operators it means to take whole (out of decomposition).
    When lowering then fails on one of them, naming its node (it was neither delegated
    nor decomposed: OpenVINO with ``pixel_shuffle``; coremltools could not convert it:
    ``max_pool1d`` with a default stride), it is lowered again with that operator
    decomposed into the core operators it is made of, which the backend or the portable
    kernels take; ``edge.decomposed_instead`` names those operators.

    When a backend's own pass crashes on a partition (``fallback``), the smallest part
    that crashes is left to the portable kernels (``stages/fallback.py``);
    ``edge.left_out`` says what, with the upstream error.
    """
    cut = Cut()

    def attempt():
        return _lower_decomposing(exported, chain, precision, plan, cut)

    try:
        edge, left_out = attempt(), []
    except Exception as exc:
        if not fallback or cut.last is None:
            raise
        edge, left_out = lower_leaving_out(attempt, cut, exc)
        _quantized_kernels()  # the out variants of what a quantized part left out calls (quantized_decomposed::)
    edge.left_out = left_out
    return edge


def _quantized_kernels() -> None:
    try:
        importlib.import_module("executorch.kernels.quantized")
    except ImportError:  # a wheel without them: serializing names the missing out variants
        pass


def _lower_decomposing(exported, chain, precision, plan, cut):
    dropped: set = set()
    while True:
        kept: set = set()
        try:
            edge = _lower(exported, chain, precision, plan, dropped, kept, cut)
        except Exception as exc:
            op = _kept_whole_in(exc, kept - dropped)
            if op is None:
                raise
            dropped.add(op)
            continue
        if left := _left_whole(edge, kept - dropped):
            dropped |= left
            continue
        edge.decomposed_instead = sorted(str(op) for op in dropped)
        return edge


def _lower(exported, chain, precision, plan, dropped: set, kept: set, cut):
    rest = zip(chain[1:], chain_precisions(chain, precision)[1:])
    others = [p for b, at in rest for p in b.fit(exported, b.partitioners(at))]
    mine = chain[0].fit(exported, plan.partitioners)
    guarded = cut.guard([*mine, *others])
    plan = dataclasses.replace(plan, partitioners=guarded[:len(mine)])
    others = guarded[len(mine):]
    with contextlib.ExitStack() as inside:
        for backend in chain:
            inside.enter_context(backend.lowering_context())
        inside.enter_context(kept_whole(exported, [*plan.partitioners, *others], dropped, kept))
        return chain[0].lower(exported, plan, others)


def _left_whole(edge, kept: set) -> set:
    """The operators kept whole that no backend then took and that have no out variant:
    no kernel could run them, and the program would not serialize (Core ML keeps
    ``aten.stft`` whole, then left it out of its delegate for its complex result:
    "Missing out variants: {'aten::stft'}")."""
    from executorch.exir.operator.convert import to_out_variant

    found = set()
    for node in edge.exported_program().graph.nodes:
        op = getattr(node.target, "_op", node.target) if node.op == "call_function" else None
        if op in kept and op not in found:
            try:
                to_out_variant(op)
            except Exception:  # noqa: BLE001 - ExecuTorch raises several kinds for "none"
                found.add(op)
    return found


def _kept_whole_in(exc: BaseException, kept: set):
    """The operator kept whole whose node ``exc`` names first (``aten_pixel_shuffle_default``,
    ``aten_max_pool1d_default_1``, ``<EdgeOpOverload: aten.pixel_shuffle.default>``), if any;
    not one of the operators ExecuTorch lists after "The following ops:"."""
    text = str(exc).split("The following ops:")[0]
    found = []
    for op in kept:
        name = str(op)
        node = re.search(rf"\b{re.escape(name.replace('.', '_'))}(_\d+)?\b|<EdgeOpOverload: {re.escape(name)}>", text)
        if node:
            found.append((node.start(), name, op))
    return min(found, key=lambda f: f[:2])[2] if found else None


@contextlib.contextmanager
def kept_whole(exported, partitioners, dropped: AbstractSet = frozenset(), kept: set | None = None):
    """While ``partitioners`` lower ``exported``, the operators they keep whole, less those
    in ``dropped`` and those inside ``torch.cond``/``while_loop`` branches (collected into
    ``kept``). Partitioners keep their operators whole everywhere but delegate only
    outside branches: an operator kept whole inside a branch was neither decomposed nor
    delegated, and lowering failed ("aten.linear.default … was not decomposed or
    delegated"), so a program with branches keeps whole only the operators no branch holds."""
    excluded = ops_in_branches(exported.graph_module) | set(dropped)
    changing = [p for p in partitioners if hasattr(p, "ops_to_not_decompose")]
    for p in changing:
        def filtered(program, _original=p.ops_to_not_decompose):
            ops, check = _original(program)
            if kept is not None:
                kept.update(ops)
            return [op for op in ops if op not in excluded], check

        p.ops_to_not_decompose = filtered  # this instance, for this lowering
    try:
        yield
    finally:
        for p in changing:
            del p.ops_to_not_decompose


def ops_in_branches(gm, inside: bool = False) -> set:
    """The call_function targets in the subgraphs of ``gm`` (control-flow branches and bodies)."""
    import torch

    found = set()
    for node in gm.graph.nodes:
        if inside and node.op == "call_function":
            found.add(node.target)
        elif node.op == "get_attr" and isinstance(sub := getattr(gm, node.target, None), torch.fx.GraphModule):
            found |= ops_in_branches(sub, True)
    return found


# Graph bookkeeping, not kernels: left out of the portable op counts.
_NOT_OPS = {"getitem", "alloc"}


def delegation_of(gm) -> Delegation:
    """Delegation facts from the lowered edge graph module.

    Call it before ``to_executorch``, which adds memory-planning nodes; the caller
    fills ``delegates_in_program`` from the serialized program.
    """
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(gm)
    nodes: Counter[str] = Counter()
    subgraphs: Counter[str] = Counter()
    graphs = [gm.graph]
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            lowered = getattr(gm, node.name)
            subgraphs[lowered.backend_id] += 1
            graphs.append(lowered.original_module.graph)
            nodes[lowered.backend_id] += sum(
                1 for n in lowered.original_module.graph.nodes if n.op == "call_function"
            )
    portable = sorted(
        (
            (op, b.non_delegated)
            for op, b in info.delegation_by_operator.items()
            if b.non_delegated and op not in _NOT_OPS
        ),
        key=lambda kv: (-kv[1], kv[0]),
    )
    non_delegated = sum(n for _, n in portable)
    return Delegation(
        total_nodes=info.num_delegated_nodes + non_delegated,
        delegated_nodes=info.num_delegated_nodes,
        nodes_per_backend=dict(nodes),
        subgraphs_per_backend=dict(subgraphs),
        portable_ops=[OpCount(op, n) for op, n in portable],
        delegates_in_program=[],
        precision_ops=precision_evidence(graphs),
    )


def precision_evidence(graphs) -> dict[str, int]:
    """What in the lowered graphs (delegated subgraphs included) shows the precision:
    quantize/dequantize nodes, nodes computing in fp16, int8/int4 weights."""
    import torch

    counts: Counter[str] = Counter()
    for graph in graphs:
        for n in graph.nodes:
            if n.op != "call_function":
                continue
            name = str(getattr(n.target, "__name__", n.target))
            if "quantize" in name:
                counts["quantize_ops"] += 1
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor) and val.dtype == torch.float16:
                counts["fp16_nodes"] += 1
    return dict(counts)

