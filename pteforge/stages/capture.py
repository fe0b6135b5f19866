"""Build the eager model and capture it once with torch.export.

The capture (a ``.pt2``) and the reference (inputs and eager outputs) are files,
so that every target lowers from the same capture, in this process or another.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import CaptureError, ModelError, PteforgeError, UsageError, one_line
from ..core.result import Stage
from ..core.spec import ExportConfig, InputSpec, JobConfig, ModelSpec
from ..core.system import one_thread
from ..families import family, model_input
from ..families.vision import shipped_images, takes_images
from ..models.onnx.reference import reference_model
from ..models.signature import forward_signature
from ..models.synthetic import make_inputs
from ..models.torchscript import forward_arguments, given_arguments, torchscript_inputs
from ..runtime.pte import output_names
from .capture_failure import capture_failure, capture_fix, out_of_memory


@dataclass(frozen=True)
class Capture:
    model: str
    pt2_path: str
    reference_path: str  # torch.save'd {"inputs", "outputs", and for image models "images", "image_outputs", "image_names"}
    timings: dict[str, float] = field(default_factory=dict)
    # "backend:precision" -> .pt2 of the model after that backend's source transform
    # (torchao weight-only int4 must be applied to the eager model, before capture)
    variants: dict[str, str] = field(default_factory=dict)
    # more than one target of this run quantizes it: each saves what it quantized for the others
    share_quantized: bool = False
    # the program's weights and constants at fp32 (integer tensors at their own size): what a
    # reduced precision's size is measured against when no fp32 program is lowered
    fp32_bytes: int = 0
    # per input the program takes: what seeded ids are drawn below (InputSpec.high), or None
    id_highs: tuple = ()


def variant_key(backend: str, precision) -> str:
    return f"{backend}:{getattr(precision, 'value', precision)}"


def build_model(spec: ModelSpec, weights: str, seed: int):
    module_name, _, func_name = spec.factory.partition(":")
    if spec.source == "factory":
        from ..models.factory import build_factory

        return build_factory(spec, weights, seed)
    factory = getattr(importlib.import_module(module_name), func_name)
    return factory(spec, weights, seed)




def reference_inputs(spec: ModelSpec, config: ExportConfig | JobConfig) -> tuple[list[tuple], str | None]:
    """The inputs the program is captured with and verified on, and where they came from
    (None: seeded). By default the example input (seed) plus ``verify_inputs`` more seeded
    inputs; with input files in ``--calibration DIR`` (``samples``), the files after those
    calibration uses, up to ``1 + verify_inputs`` of them, so the verdict is on real inputs
    calibration did not see."""
    from ..core import samples

    if samples.holds_samples(config.calibration_dir):
        _, held = samples.split(config)
        if held:
            return [samples.load(p, spec) for p in held], f"{len(held)} file(s) of --calibration {config.calibration_dir} that calibration did not use"
    return [make_inputs(spec, config.seed + i) for i in range(1 + max(config.verify_inputs, 0))], None


def capture(
    spec: ModelSpec, config: ExportConfig | JobConfig, work_dir: Path, model=None, on_stage=None, variants: tuple = (),
    main: bool = True,
) -> Capture:
    """Export ``spec`` once; save the program and the eager reference outputs.

    ``variants`` are (backend, precision) pairs whose backend transforms the eager
    model before capture; each is captured once more, after its transform. Without
    ``main``, only those (a job of their own, after the main capture's).
    """
    with one_thread():
        try:
            return _capture(spec, config, work_dir, model, variants, main)
        except (RuntimeError, MemoryError) as exc:
            if (short := out_of_memory(exc, spec)) is None:
                raise
            raise short from exc


def _capture(spec: ModelSpec, config: ExportConfig | JobConfig, work_dir: Path, model, variants: tuple, main: bool) -> Capture:
    import torch

    from ..core.io import check_writable_tmp

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if model is None:
        model = build_model(spec, config.weights, config.seed)
    timings[Stage.BUILD.value] = time.perf_counter() - t0

    inputs, inputs_from = reference_inputs(spec, config)
    if not main:
        return Capture(spec.name, "", "", timings, _variants(model, spec, Path(work_dir), variants, inputs[0], timings))
    t0 = time.perf_counter()
    try:
        exported = export_model(model, inputs[0])
    except CaptureError:
        raise
    except Exception as exc:
        raise capture_failure(exc, model, spec, inputs[0]) from exc
    if not exported.graph_signature.user_outputs:  # None, a number: a program with no output cannot be saved
        raise CaptureError("the model returns no tensor, so its program would have no output",
                           fix="return from forward() the tensors an app reads")
    _check_not_broadcast(exported, spec)
    highs = id_highs(exported)
    if any(highs) and inputs_from is None:  # seeded ids, now drawn within the smallest table each one indexes
        spec = spec.with_highs(highs)
        inputs, inputs_from = reference_inputs(spec, config)
    timings[Stage.CAPTURE.value] = time.perf_counter() - t0

    t0 = time.perf_counter()
    reference = {"inputs": [list(x) for x in inputs], **({"inputs_from": inputs_from} if inputs_from else {}),
                 "input_free": input_free_outputs(exported)}
    eager = reference_model(spec, model)
    with torch.no_grad():
        try:
            reference["outputs"] = [flatten_outputs(eager(*copies(x))) for x in inputs]
        except Exception as exc:
            if (fix := capture_fix(model, inputs[0], exc)) is None:
                raise
            raise CaptureError(one_line(exc), fix=fix) from exc
        reference.update(validation_images(spec, eager))
    timings[Stage.REFERENCE.value] = time.perf_counter() - t0

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    pt2 = work_dir / f"{spec.name}.pt2"
    ref = work_dir / f"{spec.name}.reference.pt"
    with check_writable_tmp(work_dir):
        torch.export.save(exported, str(pt2))
        torch.save(reference, ref)
    return Capture(spec.name, str(pt2), str(ref), timings, _variants(model, spec, work_dir, variants, inputs[0], timings),
                   fp32_bytes=fp32_bytes(exported), id_highs=highs)


# what passes an id on unchanged, between an input and the embedding it indexes
_SAME_IDS = ("view", "reshape", "_unsafe_view", "unsqueeze", "squeeze", "flatten", "expand", "slice", "select", "clone",
             "contiguous", "to", "_to_copy", "permute", "transpose", "t", "detach", "alias", "lift_fresh_copy")


def id_highs(exported) -> tuple:
    """Per input the program takes: how many positions the smallest dimension it indexes
    holds (an embedding table's rows, the dimension a ``gather``, ``index_select``,
    ``x[ids]`` or scatter reads or writes at those ids), where that is fewer than seeded ids
    span (``INTEGER_HIGH``: a categorical feature of 3 levels, BERT's 2 token types, a
    gather over 3 classes), else None. Read from the graph, which does not depend on the
    ids' values."""
    import torch
    from torch.export.graph_signature import InputKind

    from ..models.synthetic import INTEGER_HIGH

    users = [s.arg.name for s in exported.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    nodes = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    highs = []
    for name in users:
        node, sizes = nodes.get(name), []
        value = node.meta.get("val") if node is not None else None
        pending: list = [node] if isinstance(value, torch.Tensor) and not value.is_floating_point() else []
        while pending:
            current = pending.pop()
            for user in current.users:
                op = getattr(user.target, "__name__", "").split(".")[0]
                sizes += _indexed_sizes(op, user, current)
                if op in _SAME_IDS and user.args and user.args[0] is current:
                    pending.append(user)
        smallest = min(sizes, default=None)
        highs.append(smallest if smallest is not None and smallest < INTEGER_HIGH else None)
    return tuple(highs)


# the operators that read or write their first argument at positions another tensor holds:
# at one dimension (their second argument; the positions their third), or at each dimension a
# list of positions indexes (their second argument)
_AT_DIM = ("gather", "index_select", "scatter", "scatter_add", "scatter_reduce", "index_add", "index_copy",
           "index_fill")
_AT_EACH = ("index", "_unsafe_index", "index_put", "_unsafe_index_put")


def _indexed_sizes(op: str, user, ids) -> list[int]:
    """The sizes of the dimensions ``user`` (an ``op``) indexes with ``ids``: [] where it
    takes them otherwise (as data, or as a shape) or a size is not a number."""
    args = user.args

    def size(node, dim) -> list[int]:
        shape = getattr(getattr(node, "meta", {}).get("val"), "shape", None)
        if shape is None or not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
            return []
        return [shape[dim]] if isinstance(shape[dim], int) else []

    if op in ("embedding", "embedding_bag", "_embedding_bag") and len(args) > 1 and args[1] is ids:
        return size(args[0], 0)
    if op in _AT_DIM and len(args) > 2 and args[2] is ids:
        return size(args[0], args[1])
    if op in _AT_EACH and len(args) > 1 and isinstance(args[1], (list, tuple)):
        return [n for k, i in enumerate(args[1]) if i is ids for n in size(args[0], k)]
    return []


def input_free_outputs(exported) -> list[int]:
    """The user outputs of ``exported`` that no user input reaches (a constant the model
    returns): that they are the same on every input says nothing of the inputs."""
    sig = exported.graph_signature
    inputs = set(sig.user_inputs)
    outputs = list(exported.graph_module.graph.output_node().args[0])[-len(sig.user_outputs):]
    free = []
    for j, node in enumerate(outputs):
        stack, seen, reached = [node], set(), False
        while stack and not reached:
            n = stack.pop()
            if not hasattr(n, "all_input_nodes") or n in seen:
                continue
            seen.add(n)
            reached = n.op == "placeholder" and n.name in inputs
            stack.extend(n.all_input_nodes)
        if not reached:
            free.append(j)
    return free


def fp32_bytes(exported) -> int:
    """The bytes of ``exported``'s weights, buffers and constants with every float at fp32."""
    import torch

    tensors = [*exported.state_dict.values(), *exported.constants.values()]
    return sum(t.numel() * (4 if t.is_floating_point() else t.element_size())
               for t in tensors if isinstance(t, torch.Tensor))


def _variants(model, spec: ModelSpec, work_dir: Path, variants: tuple, example: tuple, timings: dict) -> dict[str, str]:
    """Each (backend, precision) of ``variants`` captured after its source transform:
    {"backend:precision": its .pt2}."""
    import torch

    from ..core.io import check_writable_tmp

    saved: dict[str, str] = {}
    if not variants:
        return saved
    work_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with check_writable_tmp(work_dir):
        for backend, precision in variants:
            key = variant_key(backend, precision)
            path = work_dir / f"{spec.name}.{key.replace(':', '_')}.pt2"
            torch.export.save(transformed_capture(model, backend, precision, example), str(path))
            saved[key] = str(path)
    timings[Stage.CAPTURE_VARIANTS.value] = time.perf_counter() - t0
    return saved


def transformed_capture(model, backend: str, precision, example: tuple):
    """The eager model after ``backend``'s source transform for ``precision``, captured."""
    from torchao.quantization import quantize_

    from ..backends import default_registry

    config = default_registry().get(backend).source_transform(precision)
    assert config is not None  # a weight-quantized variant's precision: the backend transforms the source for it
    variant = copy.deepcopy(model)
    quantize_(variant, config.ao_base_config, config.filter_fn)
    return export_model(variant, example)


_PLAIN_CONTAINERS = (tuple, list, dict, OrderedDict)


def export_model(model, example: tuple):
    """``torch.export`` of ``model``; a model that returns more than tensors in lists,
    tuples and dicts (a namedtuple, a dataclass such as a Hugging Face ``ModelOutput``, an
    int, None) is captured as returning a dict of its tensors, in pytree order, each
    under its place in the output (``logits``, ``3.0``: ``pte.output_names``), which the
    manifest names them by.

    An ExecuTorch program returns a flat list anyway; but a namedtuple or a registered
    class in the output's structure cannot be saved without its type registered, or
    loaded where it is not imported, and a bundled program takes only tensor outputs.
    The eager reference (``flatten_outputs``) is the same tensors in the same order."""
    import torch


    if isinstance(model, torch.jit.ScriptModule):
        return _converted(model, example)
    with torch.no_grad():
        exported = torch.export.export(model, example)
        _work_on_copies(exported)
        if _tensors_in_plain_containers(exported):
            return exported
        names = output_names(exported) or []

        class TensorOutputs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                tensors = flatten_outputs_live(self.model(*args))
                if len(set(names)) == len(tensors) == len(names):
                    return dict(zip(names, tensors))
                return tuple(tensors)

        setattr(TensorOutputs.forward, "__signature__", _positional_signature(model, len(example)))  # inspect reads it

        return torch.export.export(TensorOutputs(), example)


def in_place_writes(exported) -> list[tuple]:
    """Each in-place write of the program (``x.add_(1)``, ``y[:, :2].mul_(2)``, an ``out=``):
    (the value written into, the tensor it is part of: itself, or the placeholder or
    operator output it is a view of)."""
    import torch

    root: dict = {}  # a value -> the tensor it is a view of (itself if none)
    writes: list[tuple] = []
    for node in exported.graph.nodes:
        if node.op == "placeholder":
            root[node] = node
            continue
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            root[node] = node
            continue
        written = [(value, root.get(value, value)) for arg, value in zip(schema.arguments, node.args)
                   if arg.alias_info is not None and arg.alias_info.is_write and isinstance(value, torch.fx.Node)]
        writes += written
        viewed = [a for a in node.args if isinstance(a, torch.fx.Node)] \
            if schema.returns and schema.returns[0].alias_info is not None and not written else []
        # a view's base; an in-place op's result is where a chain of them (``+=``, then ``relu_``)
        # goes on writing, as a tensor of its own
        root[node] = root.get(viewed[0], viewed[0]) if viewed else node
    return writes


def written_inputs(exported, kind: str) -> list:
    """The inputs of ``kind`` (an ``InputKind`` name: ``BUFFER``, a streaming model's
    running state; ``USER_INPUT``, a ``forward`` that adds to its argument) that an
    operator of the program writes into in place, or into a view of: their placeholders."""
    from torch.export.graph_signature import InputKind

    inputs = {spec.arg.name for spec in exported.graph_signature.input_specs if spec.kind == InputKind[kind]}
    return list(dict.fromkeys(whole for _, whole in in_place_writes(exported)
                              if whole.op == "placeholder" and whole.name in inputs))


def _work_on_copies(exported) -> None:
    """A ``forward`` that changes an input in place (``x.add_(1)``) works on a copy of it:
    otherwise its ExecuTorch program returns the changed input before its own outputs
    and writes it into the app's buffer. With the copy the program returns what
    ``forward`` returns and leaves its inputs as they were, as an app expects."""
    import torch

    written = written_inputs(exported, "USER_INPUT")
    if not written:
        return
    graph = exported.graph
    last = [n for n in graph.nodes if n.op == "placeholder"][-1]
    for node in written:
        with graph.inserting_after(last):
            copy = graph.call_function(torch.ops.aten.clone.default, (node,))
        copy.meta.update({k: v for k, v in node.meta.items() if k in ("val", "tensor_meta", "stack_trace")})
        node.replace_all_uses_with(copy, delete_user_cb=lambda user, copy=copy: user is not copy)
    graph.lint()
    exported.graph_module.recompile()


def _positional_signature(model, count: int):
    """``forward(self, <the model's first count arguments>)``, so a wrapper's inputs keep
    the model's argument names; ``forward(self, *args)`` when they are not plain
    positional arguments."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())[:count]
    except (TypeError, ValueError):
        return forward_signature(None)
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return forward_signature([p.name for p in params] if len(params) == count and all(p.kind in plain for p in params)
                             else None)


def _converted(model, example: tuple):
    """A TorchScript module as an ExportedProgram: torch.export refuses ScriptModules;
    torch's TorchScript converter translates its graph (mobilenet_v3_small scripted or
    traced: the same outputs, exactly)."""
    import torch
    from torch._export.converter import TS2EPConverter

    model = _tensors_only(model, example)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one per unused buffer ("Manually populate … num_batches_tracked")
        converted = TS2EPConverter(model, example).convert()
        # the converter leaves sizes a traced model computed (aten::size, arange in YOLO's
        # decoding) as unbacked symbols, which lowering cannot bound: exported again on the
        # example, they are the example's sizes, as torch.export makes them
        module = converted.module(check_guards=False)
        _canonical_convolutions(module)
        _parameters_again(module, {name for name, _ in model.named_parameters()})
        return torch.export.export(module, example)


def _tensors_only(model, example: tuple):
    """``model``, or where its ``forward`` takes more than the example's tensors (optional
    arguments, a factory's ScriptModule) a module calling it with them, the rest at their
    defaults (``models.torchscript.given_arguments``); what TorchScript's converter would fail on
    far from the cause (an argument without a default that is no tensor, or that no tensor
    is given for) is refused in one line naming it."""
    arguments = forward_arguments(model)
    if len(arguments) == len(example) and all(a.type == "Tensor" for a in arguments):
        return model
    given = tuple(InputSpec(tuple(x.shape), str(x.dtype).removeprefix("torch.")) for x in example)
    try:
        return given_arguments(model, torchscript_inputs("the TorchScript module", arguments, given))
    except PteforgeError as exc:
        raise CaptureError(str(exc), fix=exc.fix) from None


def _parameters_again(module, names: set[str]) -> None:
    """The converter makes every weight a buffer; partitioners and the Arm passes tell
    weights by their being parameters (TOSA lowering of a traced mobilenet_v3_small failed,
    its quantization too): the TorchScript module's parameters become parameters again."""
    import torch

    for name in names:
        owner, _, leaf = name.rpartition(".")
        try:
            sub = module.get_submodule(owner)
        except AttributeError:
            continue
        if leaf in sub._buffers and sub._buffers[leaf] is not None:
            sub.register_parameter(leaf, torch.nn.Parameter(sub._buffers.pop(leaf), requires_grad=False))


def _canonical_convolutions(module) -> None:
    """TorchScript's ``aten::_convolution`` becomes ``aten.convolution`` where torch.export
    writes ``aten.conv2d`` (conv1d, conv3d, conv_transpose*): the Arm quantizer and TOSA
    lowering match only the latter (a traced mobilenet_v3_small: TOSA's int8 and fp32
    lowering failed). Each is written back as the op torch.export makes."""
    import torch

    aten = torch.ops.aten
    plain = {1: aten.conv1d.default, 2: aten.conv2d.default, 3: aten.conv3d.default}
    transposed = {1: aten.conv_transpose1d.default, 2: aten.conv_transpose2d.input, 3: aten.conv_transpose3d.input}
    for node in module.graph.nodes:
        if node.op != "call_function" or node.target is not aten.convolution.default or node.kwargs:
            continue
        x, weight, bias, stride, padding, dilation, is_transposed, output_padding, groups = node.args
        dims = len(stride)
        if dims not in plain:
            continue
        if is_transposed:
            node.target, node.args = transposed[dims], (x, weight, bias, stride, padding, output_padding, groups, dilation)
        elif not any(output_padding):
            node.target, node.args = plain[dims], (x, weight, bias, stride, padding, dilation, groups)
    module.recompile()


def _tensors_in_plain_containers(exported) -> bool:
    import torch

    def plain(spec) -> bool:
        return spec.is_leaf() or (spec.type in _PLAIN_CONTAINERS and all(plain(c) for c in spec.children()))

    outputs = exported.graph.output_node().args[0]
    return plain(exported.call_spec.out_spec) and all(isinstance(o, torch.fx.Node) for o in outputs)


def flatten_outputs_live(out) -> list:
    """The tensors of ``out`` in pytree order, as they are (for tracing)."""
    import torch
    from torch.utils import _pytree as pytree

    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def validation_images(spec: ModelSpec, model) -> dict:
    """Eager outputs on the photos our dependencies ship, for image models: the
    validation set precisions are compared on."""
    if not takes_images(spec):
        return {}
    photos = shipped_images()
    images = [[model_input(p, spec)] for p in photos]
    outputs = [flatten_outputs(model(*x)) for x in images]
    if outputs and spec.source != "catalog":
        _check_task_outputs(spec, photos[0], outputs[0])
    return {"images": images, "image_outputs": outputs, "image_names": [p.name for p in photos]}


# elementwise operators through which an input of size 1 in a dim silently takes a
# constant's larger size there (a normalisation vector, a per-channel scale)
_BROADCASTING = ("add", "sub", "rsub", "mul", "div")


def broadcast_input(exported) -> tuple[str, int, int, list[int]] | None:
    """(input, dim, its size there, the shape it took) of a user input that the first
    operator it reaches widens by broadcasting against a constant of the model (a weight, a
    buffer, a lifted tensor): an ``--input-shape`` of 1 channel where the model's first
    layer (``(x - mean) / std`` with 3 means) takes 3 runs, computes on 3 copies of the
    one, and would make the app feed one channel. None when no input is widened so."""
    sig = exported.graph_signature
    constants = {*sig.inputs_to_parameters, *sig.inputs_to_buffers, *getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    for node in exported.graph.nodes:
        if node.op != "placeholder" or node.name not in sig.user_inputs or "val" not in node.meta:
            continue
        shape = list(getattr(node.meta["val"], "shape", []))
        for user in node.users:
            name = getattr(user.target, "__name__", str(user.target)).split(".")[0]
            others = [a for a in user.args[:2] if a is not node and hasattr(a, "op")]
            if name not in _BROADCASTING or len(others) != 1:
                continue
            other = others[0]
            if not (other.op == "get_attr" or (other.op == "placeholder" and other.name in constants)):
                continue
            out = list(getattr(user.meta.get("val"), "shape", []))
            for dim in range(1, min(len(shape), len(out))):
                if len(out) == len(shape) and shape[dim] == 1 and out[dim] > 1:
                    return node.name, dim, shape[dim], out
    return None


def _check_not_broadcast(exported, spec: ModelSpec) -> None:
    """Refuse an input shape the model takes only by broadcasting it (``broadcast_input``)."""
    found = broadcast_input(exported)
    if found is None:
        return
    name, dim, _, took = found
    given = ",".join(str(d) for d in (spec.fed[0].shape if len(spec.fed) == 1 else ()))
    wanted = ",".join(str(d) for d in took)
    raise UsageError(f"--input-shape {given or name}: the model's first layer takes {took[dim]} at dim {dim} of input "
                     f"'{name}' (shape {wanted}) and only broadcasts the 1 given there, so the manifest would tell the "
                     f"app to feed 1 where the model computes on {took[dim]}", fix=f"give --input-shape {wanted}")


def _check_task_outputs(spec: ModelSpec, photo, outputs: list) -> None:
    """A model of one's own given a task (``--task``): its outputs are what that task's
    app code reads (its family decodes them on a photo), and score as many classes as its
    labels name (``--labels-file``, or its family's)."""
    from ..models.task import TASKS

    fam, task = family(spec.family), next((word for word, t in TASKS.items() if t == spec.task), spec.task)
    shapes = ", ".join("x".join(map(str, o.shape)) for o in outputs)
    fix = "give the --task whose outputs these are, or leave out --task (the app then lists it as custom)"
    try:
        scored = fam.output_classes(outputs)
        fam.decode(outputs, fam.prepare(photo, spec).meta, list(spec.names) or None)
    except Exception as exc:  # noqa: BLE001 - any failure to read them is the same mistake
        raise ModelError(f"{spec.name}'s outputs ({shapes}) are not what --task {task} reads: the "
                         f"{fam.category} family's decoding failed on them ({one_line(exc, 160)})", fix=fix) from exc
    if scored is not None and scored < 1:
        raise ModelError(f"{spec.name}'s outputs ({shapes}) are not what --task {task} reads: as the "
                         f"{fam.category} family's, they would score {scored} classes", fix=fix)
    named = len(spec.names) if spec.names else len(fam.label_names()) if fam.labels_file and scored else None
    if scored is not None and named is not None and scored != named:
        where = "--labels-file" if spec.names else f"the {fam.category} family's {fam.labels_file}"
        raise ModelError(f"{spec.name}'s output scores {scored} classes, and {where} names {named}",
                         fix="give --labels-file with one class per line, as many as the model scores")


def copies(inputs) -> tuple:
    """``inputs`` with each tensor copied: what an eager call may change in place
    (``forward`` adding to its input) is not what the program is later fed."""
    import torch

    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def flatten_outputs(out) -> list:
    """The tensors of a model's output, in the order its exported program returns them:
    torch's pytree order (a dict's insertion order, a ModelOutput's fields), which is the
    order ``torch.export`` flattens outputs in. Values that are not tensors are left out,
    as ``tensor_outputs`` leaves them out of a program's outputs."""
    return [t.detach().clone() for t in flatten_outputs_live(out)]


def tensor_outputs(values) -> list:
    """The tensors of what a program's method returned (it also returns ints, floats,
    bools and None that the model returned)."""
    import torch

    return [v for v in values if isinstance(v, torch.Tensor)]
