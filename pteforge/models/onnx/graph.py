"""An ONNX graph made ready for onnx2torch: its dynamic dims fixed to the shapes given,
its scalar inputs held at their values, the branches those decide taken, and what it
computes from constants alone computed (``fold``), kept only where ONNX Runtime gives the
original's outputs (``checked``)."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ...core.spec import InputSpec

log = logging.getLogger(__name__)


def fixed(model, inputs: tuple[InputSpec, ...]):
    """``model`` with its inputs' dynamic dims set to the shapes ``inputs`` give, and its
    scalar inputs given a value held at it (a constant): what its shape computations
    (YOLO's anchors from ``Shape``/``Range``, a recognizer's sequence length) and branches
    on a sample rate need to be folded to constants before the import."""
    by_name = {i.name: i for i in inputs if i.name}
    if not by_name:
        return model
    weights = {init.name for init in model.graph.initializer}
    feeds = [v for v in model.graph.input if v.name not in weights]
    for value in feeds:
        given = by_name.get(value.name)
        if given is None:
            continue
        if given.value is not None:
            model.graph.initializer.append(onnx.numpy_helper.from_array(
                np.array(given.value, dtype=np.dtype(given.dtype)), value.name))
            continue
        for dim, size in zip(value.type.tensor_type.shape.dim, given.shape):
            if dim.dim_value <= 0:
                dim.Clear()
                dim.dim_value = size
    held = {i.name for i in inputs if i.value is not None}
    kept = [v for v in model.graph.input if v.name not in held]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def plain_names(model):
    """``model`` with node names torch.export can save in its module stacks: tf2onnx joins
    fused TensorFlow ops' names with ';' (basic-pitch's ``model_1/.../strided_slice;...``),
    which ``torch.export.load`` then split wrong ("expected metadata_split to return 3
    parts")."""
    for node in model.graph.node:
        node.name = re.sub(r"[;,()\[\]]", "_", node.name)
    return model


def outputs_by_identity(model):
    """``model`` with each graph output that a node of several outputs makes (an LSTM's
    final state, a Split's part) made by an Identity of it: onnx2torch returned such a
    node's whole tuple as that output (a model returning an LSTM's ``hn`` and ``cn`` gave
    4 outputs for 3)."""
    model = _copy(model)
    returned = {o.name for o in model.graph.output}
    extra = []
    for node in model.graph.node:
        if len(node.output) < 2:
            continue
        for i, name in enumerate(node.output):
            if name in returned:
                node.output[i] = f"{name}/returned"
                extra.append(helper.make_node("Identity", [node.output[i]], [name], name=f"{name}/identity"))
    model.graph.node.extend(extra)
    return model


def seeded_feeds(model, seed: int = 0) -> dict:
    """Seeded inputs for ``model``'s graph inputs, by name, at the shapes it declares (a
    dynamic dim, which ``fixed`` has not fixed, is 1): floats from a normal distribution,
    integers in [0, 10) (a valid index into any embedding or gather of 10 rows), as
    pteforge's seeded inputs are."""
    rng = np.random.default_rng(seed)
    weights = {init.name for init in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in weights:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        feeds[value.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f" else
                             rng.integers(0, 2, shape).astype(dtype) if dtype.kind == "b" else
                             rng.integers(0, 10, shape).astype(dtype))
    return feeds


def checked(candidate, original, feeds: dict):
    """``candidate`` (``folded``) when ONNX Runtime gives its outputs on ``feeds`` (seeded
    inputs by name) as it gives the original's (same dtypes and shapes, within float
    rounding), else None."""
    if candidate is None:
        return None

    try:
        before, after = (ort_session(m).run(None, feeds) for m in (original, candidate))
    except Exception:  # noqa: BLE001 - a graph ONNX Runtime cannot run on these inputs: not folded
        log.info("the folded ONNX graph could not be checked", exc_info=True)
        return None
    same = len(before) == len(after) and all(
        a.shape == b.shape and a.dtype == b.dtype and np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
        for a, b in zip(before, after))
    if not same:
        log.warning("folding changed the graph's outputs: imported unfolded")
    return candidate if same else None


def ort_session(model):
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def folded(model):
    """``model`` with the branches its constants decide taken (``taken_branches``) and
    what it computes from constants alone computed (``folded_by_onnxruntime``); None when
    neither could be done."""
    branched = taken_branches(model)
    return folded_by_onnxruntime(branched) or (branched if branched != model else None)


# ONNX Runtime's basic optimizations, in a child process: it crashed the process on a
# graph with its sample rate held (silero-vad's, "Segmentation fault" inlining its Ifs)
_FOLD = """
import sys, onnxruntime
options = onnxruntime.SessionOptions()
options.log_severity_level = 3
options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
options.optimized_model_filepath = sys.argv[2]
onnxruntime.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
"""


def folded_by_onnxruntime(model):
    """``model`` with what it computes from constants alone computed: ONNX Runtime's basic
    graph optimizations (constant folding, semantics-preserving fusions into standard
    operators), which turn the pads and shapes torch's TorchScript-based exporter computes
    (``F.pad``: ConstantOfShape, Concat, Slice) and the anchors a detector computes from
    its (now fixed) input shape into constants ``with_constant_arguments`` then takes.
    None when ONNX Runtime cannot (or crashes), or leaves an operator of its own."""
    with tempfile.TemporaryDirectory(prefix="pteforge-onnx-") as tmp:
        source, target = Path(tmp) / "model.onnx", Path(tmp) / "folded.onnx"
        try:
            onnx.save(model, str(source))
        except ValueError:  # over 2 GB: imported as it is
            return None
        proc = subprocess.run([sys.executable, "-c", _FOLD, str(source), str(target)], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0 or not target.is_file():
            log.warning("ONNX Runtime could not fold the graph (exit %s): imported unfolded", proc.returncode)
            return None
        result = onnx.load(str(target))
    if {node.domain for node in result.graph.node} - {"", "ai.onnx"}:
        return None
    kept = [o for o in result.opset_import if o.domain in ("", "ai.onnx")]
    del result.opset_import[:]
    result.opset_import.extend(kept)
    return result


SMALL = 64  # elements: what is computed here to decide a branch (a sample rate, a shape), never a weight


def taken_branches(model, rounds: int = 16):
    """``model`` with each ``If`` whose condition its constants decide (``Equal(sr, 16000)``
    once ``sr`` is held) replaced by the branch it takes, until none is left to decide;
    the nodes a branch brings may decide further ones (silero-vad's 25 nested Ifs)."""
    if not any(node.op_type == "If" for node in model.graph.node):
        return model  # nothing to decide: the graph is not even copied
    model = _copy(model)
    graph = model.graph
    for _ in range(rounds):
        known = {i.name: numpy_helper.to_array(i) for i in graph.initializer if _numel(i.dims) <= SMALL}
        taken = None
        for index, node in enumerate(graph.node):
            if node.op_type == "Constant" and node.output:
                value = next((a for a in node.attribute if a.name in ("value", "value_int", "value_ints")), None)
                if value is not None and (value.name != "value" or _numel(value.t.dims) <= SMALL):
                    known[node.output[0]] = (numpy_helper.to_array(value.t) if value.name == "value"
                                             else np.array(helper.get_attribute_value(value)))
            elif node.op_type == "If" and node.input[0] in known:
                taken = (index, node, bool(np.asarray(known[node.input[0]]).reshape(-1)[0]))
                break
            elif node.domain in ("", "ai.onnx") and node.op_type not in ("If", "Loop", "Scan") and node.input and \
                    all(i in known for i in node.input if i):
                outputs = _evaluate(node, known)
                if outputs is not None:
                    known.update(outputs)
        if taken is None:
            return model
        index, node, condition = taken
        branch = helper.get_attribute_value(next(a for a in node.attribute
                                                 if a.name == ("then_branch" if condition else "else_branch")))
        inlined = list(branch.node) + [helper.make_node("Identity", [out.name], [name], name=f"{node.name}/taken/{i}")
                                       for i, (out, name) in enumerate(zip(branch.output, node.output))]
        graph.initializer.extend(branch.initializer)
        del graph.node[index]
        for offset, new in enumerate(inlined):
            graph.node.insert(index + offset, new)
    return model


def _copy(model):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _numel(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _evaluate(node, known: dict) -> dict | None:
    """``node``'s outputs from its constant inputs (ONNX's reference evaluator), when each
    is small; None when it cannot say."""
    try:
        inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(known[name].dtype), None)
                  for name in node.input if name]
        outputs = [helper.make_tensor_value_info(name, 0, None) for name in node.output if name]
        sub = helper.make_model(helper.make_graph([node], "one", inputs, outputs))
        values = ReferenceEvaluator(sub).run(None, {name: known[name] for name in node.input if name})
    except Exception:  # noqa: BLE001 - an op the reference evaluator lacks, or inputs it refuses: not known
        return None
    if any(getattr(v, "size", SMALL + 1) > SMALL for v in values):
        return None
    return dict(zip([name for name in node.output if name], values))
