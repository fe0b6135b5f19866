"""An ONNX graph as a PyTorch module (onnx2torch): what torch.export captures, with the
graph's input and output names, or wrapped to take pteforge's input (a published file)."""

from __future__ import annotations

import onnx
import torch
from onnx2torch import convert
from onnx2torch.node_converters.registry import get_converter

from ...core.errors import ModelError, one_line
from ...core.spec import WEIGHTS_PRETRAINED, ModelSpec
from ...patches.onnx2torch_patches import domains_in_module_names
from ..signature import forward_signature
from .constants import register_newer_converters, with_constant_arguments
from .converters import UNCONVERTIBLE, register
from .graph import checked, fixed, folded, outputs_by_identity, plain_names, seeded_feeds
from .qdq import fake_quantized


def build_onnx(spec: ModelSpec, weights: str, seed: int):
    """The ONNX graph as a PyTorch module (onnx2torch): what torch.export captures.

    onnx2torch converts each operator at the versions it knows, with pteforge's converters
    (``converters``: what it lacks, and each newer version read as the older one whose
    meaning it keeps); a file an operator of which is still left is converted down with
    ONNX's own version converter, to opset 17 then 13, and imported again. A QDQ file's
    quantization is computed in float operators first (``qdq``). What the graph computes from its constants alone is computed
    first (``_folded``), and the file as it is imported when that fails. The reference
    stays ONNX Runtime on the original file."""
    register_newer_converters()
    register()
    original = plain_names(fixed(onnx.load(spec.path), spec.inputs))
    original = fake_quantized(original) or original  # a QDQ file's quantization, in float operators
    candidates = [(m, how) for m, how in ((checked(folded(original), original, seeded_feeds(original)), "folded"),
                                          (original, "as given")) if m is not None]
    errors = []
    for model, how in candidates:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        for target in [opset, *(v for v in ONNX2TORCH_OPSETS if v < opset)]:
            try:
                with domains_in_module_names():
                    converted = convert(outputs_by_identity(
                        model if target == opset else onnx.version_converter.convert_version(model, target)))
                return _own_storage(with_constant_arguments(converted)).eval()
            except Exception as exc:  # noqa: BLE001 - onnx2torch raises what its converters raise
                errors.append(f"the graph {how} at opset {target}: {one_line(exc, 160)}")
    missing = _unconverted(candidates[0][0])  # the folded graph's, when there is one: what is left to convert
    if missing:
        raise _unconverted_error(str(spec.path), missing) from None
    raise ModelError(f"onnx2torch cannot import '{spec.path}': {'; '.join(errors)}",
                     fix="export the PyTorch model directly with --model, or re-export the ONNX file with the "
                         "operators onnx2torch converts") from None


# quantized operators of ONNX Runtime's other formats than QDQ (besides the QLinear ones)
_QUANTIZED_FORMATS = ("QGemm", "QAttention", "DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul")

# what a node left unconverted can say about its file: (whether it is such a node, why, what to do)
_FILES = (
    (lambda op, domain: not domain and not onnx.defs.has(op),
     "is no ONNX operator: the file is not valid ONNX, and ONNX Runtime refuses it too",
     "export the model again (another exporter version or opset, or what it offers instead of that operator), or "
     "export it with --model from its PyTorch code"),
    (lambda op, domain: op.startswith("QLinear") or op in _QUANTIZED_FORMATS,
     "is ONNX Runtime's quantized-operator format (QOperator, or dynamic quantization), which pteforge does not import",
     "quantize the float model again in the QDQ format (onnxruntime.quantization's quantize_static(..., "
     "quant_format=QuantFormat.QDQ)), or give its float file"),
    (lambda op, domain: domain == "com.microsoft",
     "is ONNX Runtime's own operator (domain com.microsoft), not ONNX's: ONNX Runtime's graph optimizer and tools "
     "write them for its own kernels",
     "export the ONNX file as its exporter wrote it, before ONNX Runtime rewrote it (optimized_model_filepath, "
     "onnxruntime.transformers' optimizer), or export the model with --model from its PyTorch code"),
)


def _unconverted_error(path: str, missing: list[tuple[str, str, str, int]]) -> ModelError:
    """Why the nodes ``missing`` (``_unconverted``) stop the import, in one line: what the
    file is (not valid ONNX, quantized in another format, rewritten by ONNX Runtime), an
    operator with no tensor form (``UNCONVERTIBLE``), or the converters pteforge lacks."""
    for is_it, why, fix in _FILES:
        hit = next(((n, o) for n, o, d, _ in missing if is_it(o, d)), None)
        if hit is not None:
            return ModelError(f"'{path}': {hit[1]} at node {hit[0]} {why}", fix=fix)
    known = next((o for _, o, _, _ in missing if o in UNCONVERTIBLE), None)
    if known is not None:
        why, fix = UNCONVERTIBLE[known]
        return ModelError(f"'{path}': no PyTorch form for {known}: {why}", fix=fix)
    (node, op, domain, version), more = missing[0], len(missing) - 1
    ops = sorted({f"{o}-{v}" for _, o, _, v in missing})
    return ModelError(f"'{path}': no converter to PyTorch for {op} (opset {version}{', domain ' + domain if domain else ''})"
                      f" at node {node}" + (f", and {more} more node(s) of {', '.join(ops)}" if more else ""),
                      fix=f"pteforge would need an onnx2torch converter for {', '.join(ops)} "
                          "(onnx2torch.node_converters.registry.add_converter); where it is a branch or a shape "
                          "computed from an input, give that input's shape or value with --input-shape NAME=... so it "
                          "folds away; or export the model with --model from its PyTorch code")


def _own_storage(module):
    """``module`` with each weight and constant in a storage of its own, as compact as its
    values, and without the empty constants nothing reads (the region of interest of a
    Resize taken by its scales): ``torch.export.save`` groups tensors by storage, and
    several empty ones (all at address 0: a Paddle file's Resize nodes) or views into a
    shared one failed it ("numel: integer multiplication overflow")."""
    used = {n.target for n in module.graph.nodes if n.op == "get_attr"} if hasattr(module, "graph") else None
    for name, tensor in list(module.named_buffers()) if used is not None else []:
        if tensor.numel() == 0 and used is not None and name not in used:  # used: set, where this loops
            owner, _, leaf = name.rpartition(".")
            del module.get_submodule(owner)._buffers[leaf]
    for owner in module.modules():
        for kind in ("_parameters", "_buffers"):
            for name, tensor in list(getattr(owner, kind).items()):
                if tensor is None or not isinstance(tensor, torch.Tensor):
                    continue
                compact = tensor.is_contiguous() and tensor.storage_offset() == 0 and \
                    tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
                if not compact:
                    fresh = tensor.detach().clone(memory_format=torch.contiguous_format)
                    getattr(owner, kind)[name] = torch.nn.Parameter(fresh, tensor.requires_grad) \
                        if kind == "_parameters" else fresh
    return module


def _unconverted(model) -> list[tuple[str, str, str, int]]:
    """The nodes of ``model`` (its main graph) that onnx2torch has no converter for at the
    file's opset: (node name, op type, domain, opset)."""
    opsets = {o.domain or "": o.version for o in model.opset_import}
    missing = []
    for i, node in enumerate(model.graph.node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        version = opsets.get(domain, opsets.get("ai.onnx", 0))
        try:
            get_converter(node.op_type, version, domain or "")
        except NotImplementedError:
            missing.append((node.name or f"#{i}", node.op_type, domain, version))
    return missing


ONNX2TORCH_OPSETS = (17, 13)  # opsets a newer file is converted down to, in turn


def build_onnx_named(spec: ModelSpec, weights: str, seed: int):
    """``build_onnx``, taking the graph's inputs under their ONNX names and returning its
    outputs as a dict keyed by theirs: the names the manifest gives the program's inputs
    and outputs, as the app's author knows them from the file."""
    converted = build_onnx(spec, weights, seed)
    graph = onnx.load(spec.path, load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    outputs = [o.name for o in graph.output]

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.onnx = converted  # not "graph": see onnx_file_model

        def forward(self, *args):
            out = self.onnx(*args)
            values = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(values) == len(outputs) == len(set(outputs)) and all(isinstance(v, torch.Tensor) for v in values):
                return dict(zip(outputs, values))
            return out

    held = spec.held
    setattr(Named.forward, "__signature__", forward_signature([i.name for i in graph.input  # what inspect.signature reads
                                                               if i.name not in initializers and i.name not in held]))
    return Named().eval()


def onnx_file_model(path, name: str, nhwc: bool = False, int_input: bool = False):
    """A published ONNX file imported with onnx2torch, taking pteforge's input: NCHW turned to
    the file's NHWC (``nhwc``), float values rounded to the file's int32 (``int_input``)."""
    graph = build_onnx(ModelSpec(name=name, family="custom", task="custom", inputs=(), factory="", source="onnx",
                                 path=str(path)), WEIGHTS_PRETRAINED, 0)

    class Adapted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # not "graph": the GraphModule torch.export makes of this has a graph of its own, and
            # lowering then looked the imported layers up in it ("nonexistent attribute c/Conv of graph")
            self.onnx = graph

        def forward(self, x):
            x = x.permute(0, 2, 3, 1) if nhwc else x
            return self.onnx(x.round().to(torch.int32) if int_input else x)

    return Adapted().eval()
