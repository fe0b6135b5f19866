"""Build the eager model and capture it once with torch.export.

The capture (a ``.pt2``) and the reference (inputs and eager outputs) are files,
so that every target lowers from the same capture, in this process or another.
"""

from __future__ import annotations

import importlib
import math
import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import CaptureError, one_line
from ..core.result import Stage
from ..core.spec import ExportConfig, ModelSpec
from ..models.synthetic import make_inputs


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


def variant_key(backend: str, precision) -> str:
    return f"{backend}:{getattr(precision, 'value', precision)}"


def build_model(spec: ModelSpec, weights: str, seed: int):
    module_name, _, func_name = spec.factory.partition(":")
    if spec.source == "factory":
        from ..models.custom import build_factory

        return build_factory(spec, weights, seed)
    factory = getattr(importlib.import_module(module_name), func_name)
    return factory(spec, weights, seed)


# What a data-dependent capture means, in the terms of where the model came from: a user
# who gave a file has no forward() to rewrite.
DATA_DEPENDENT = {
    "onnx": " — the graph computes a shape or takes a branch from its inputs' values (Shape, Range, If, NonZero …), "
            "which a program of fixed shapes cannot",
    "torchscript": " — the TorchScript program computes a shape or takes a branch from tensor values",
}
FILE_FIX = {
    "onnx": "fix every dynamic dim with --input-shape NAME=1,3,H,W and give scalar inputs their value "
            "(--input-shape NAME=int64:16000): pteforge then folds the shape computations and branches; or export the "
            "model with --model package.module:factory from its PyTorch code",
    "torchscript": "export the model from its PyTorch code with --model package.module:factory, or trace it again "
                   "(torch.jit.trace) at the input shape you give",
}


def summarize_export_error(exc: BaseException, source: str | None = None) -> str:
    """torch.export's messages run to pages; keep the sentence that says what broke.
    ``source``: the model's (``onnx``, ``torchscript``...), whose terms the hint uses."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    name = type(exc).__name__
    key = next(
        (
            ln
            for ln in lines
            if any(k in ln for k in ("data-dependent", "Data-dependent", "control flow", "Could not guard", "Unsupported", "not supported"))
        ),
        lines[0] if lines else name,
    )
    hint = ""
    if "data" in text.lower() and "depend" in text.lower() or "control flow" in text.lower():
        hint = DATA_DEPENDENT.get(source, " — the model branches on tensor values; rewrite with torch.cond/torch.where "
                                          "or move the branch out of forward()")
    elif isinstance(exc, TypeError) and re.search(r"missing .*required .*argument|positional argument", text):
        hint = " — forward() takes another number of inputs: give one --input-shape (and --input-dtype) per input"
    return f"torch.export failed ({name}): {key[:240]}{hint}"


def _capture_fix(model, example: tuple) -> str | None:
    """What to change when a model cannot be captured or run for a reason pteforge can
    see: weights quantized by torch.ao's eager mode (packed weights torch.export cannot
    trace), or weights of another float dtype than the inputs' (``_dtype_fix``)."""
    import torch

    if isinstance(model, torch.nn.Module) and any(
            type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        return ("the model is already quantized by torch.ao's eager mode, whose packed weights torch.export cannot "
                "capture: give the float model, and a quantized target (e.g. xnnpack:int8), which pteforge quantizes "
                "with PT2E and calibrates")
    return _dtype_fix(model, example) or _rank_fix(model, example)


def _rank_fix(model, example: tuple) -> str | None:
    """When the model's first convolution is fed the input as given and that input's rank
    is not the convolution's (a 3-number --input-shape for a Conv2d): the rank it expects."""
    import torch

    convs = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
             torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
    if not isinstance(model, torch.nn.Module) or not example or not isinstance(example[0], torch.Tensor):
        return None
    first: list = []

    def seen(module, args):
        if not first and args and isinstance(args[0], torch.Tensor):
            first.append((module, args[0]))

    named = {m: n for n, m in model.named_modules()}
    handles = [m.register_forward_pre_hook(seen) for m in named if isinstance(m, convs)]
    try:
        with torch.no_grad():
            model(*example)
    except Exception:  # noqa: BLE001 - it fails: the hook has seen what the first convolution got
        pass
    finally:
        for h in handles:
            h.remove()
    if not first or first[0][1] is not example[0] and first[0][1].shape != example[0].shape:
        return None  # the first convolution is fed something the model computed, not the input
    module, got = first[0]
    spatial = len(module.kernel_size)
    if got.dim() == spatial + 2:
        return None
    dims = ",".join(["1", str(module.in_channels), *{1: ["L"], 2: ["H", "W"], 3: ["D", "H", "W"]}[spatial]])
    return (f"the model's first layer, {named[module] or 'the model'} ({type(module).__name__}), takes {spatial + 2} "
            f"dimensions (batch, {module.in_channels} channels, {spatial} spatial) and the input given has {got.dim()} "
            f"({tuple(got.shape)}): give --input-shape {dims}")


def _dtype_fix(model, example: tuple) -> str | None:
    """When a model's floating-point weights are all of one dtype other than its float
    inputs' (a ``.half()`` or bfloat16 model fed float32): the flag that matches them."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return None
    weights = {str(p.dtype).replace("torch.", "") for p in model.parameters() if p.is_floating_point()}
    inputs = {str(x.dtype).replace("torch.", "") for x in example if isinstance(x, torch.Tensor) and x.is_floating_point()}
    if len(weights) != 1 or not inputs or inputs == weights:
        return None
    [dtype] = weights
    return (f"the model's weights are {dtype} and its inputs {', '.join(sorted(inputs))}: "
            f"give --input-dtype {dtype} for each float input, or return model.float() from the factory")


# A capture that fails because the input shape is not the one a layer takes: the layer,
# what it takes and what it got, from an eager run of the model (``shape_mismatch``).
_MATMUL = re.compile(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)")
_CHANNELS = re.compile(r"expected input\[[\d, ]*\] to have (\d+) channels, but got (\d+) channels")
_SIZES = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)")
_TRIES, _TRY_SECONDS, _TRY_ELEMENTS = 9, 30.0, 1 << 26  # the shapes tried eagerly before one is suggested


def failing_layer(model, example: tuple) -> tuple[str, object, tuple, BaseException] | None:
    """(name, module, its arguments, what it raised) of the innermost module running when an
    eager run of ``model`` on ``example`` raised (name "" for the model's own forward); None
    when it runs, or its modules take no hooks (TorchScript)."""
    import torch

    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return None
    names = {m: n for n, m in model.named_modules()}
    running: list[tuple] = []

    def enter(module, args):
        running.append((module, args))

    def leave(module, args, output):
        at = next((i for i in range(len(running) - 1, -1, -1) if running[i][0] is module), None)
        if at is not None:
            del running[at:]  # and what it caught of its children's

    handles = []
    try:
        for m in names:
            handles += [m.register_forward_pre_hook(enter), m.register_forward_hook(leave)]
        with torch.no_grad():
            model(*example)
    except Exception as exc:  # noqa: BLE001 - what the model raised is the answer
        if len(handles) < 2 * len(names):
            return None  # a module that takes no hooks
        module, args = running[-1] if running else (model, example)
        return names.get(module, ""), module, args, exc
    finally:
        for h in handles:
            h.remove()
    return None


def _mismatch(module, args: tuple, text: str) -> tuple[str, int, int, int | None] | None:
    """(what, wanted, got, dim) of a layer's input that is not the size it takes: ``features``
    (a Linear's last dim, a matmul's), ``channels`` (a convolution's), or ``sizes`` (two
    tensors combined elementwise, at ``dim``); None for another failure."""
    import torch

    x = args[0] if args and isinstance(args[0], torch.Tensor) else None
    features = getattr(module, "in_features", None)
    if x is not None and isinstance(features, int) and x.dim() >= 1 and x.shape[-1] != features:
        return "features", features, x.shape[-1], None
    kernel, channels = getattr(module, "kernel_size", None), getattr(module, "in_channels", None)
    if x is not None and isinstance(channels, int) and isinstance(kernel, tuple) and x.dim() in (len(kernel) + 1, len(kernel) + 2):
        dim = x.dim() - len(kernel) - 1
        if x.shape[dim] != channels:
            return "channels", channels, x.shape[dim], None
    if m := _MATMUL.search(text):
        return "features", int(m.group(3)), int(m.group(2)), None
    if m := _CHANNELS.search(text):
        return "channels", int(m.group(1)), int(m.group(2)), None
    if m := _SIZES.search(text):
        return "sizes", int(m.group(2)), int(m.group(1)), int(m.group(3))
    return None


def _candidates(shape: list[int], fed: bool, what: str, wanted: int, got: int) -> list[list[int]]:
    """Input shapes that may give the layer what it takes: a layer fed the input itself, the
    input with that dim changed; a Linear after a flatten, the spatial dims (or a sequence's
    length) scaled to give the features it takes, and their neighbours; sizes that must
    match, each dim of the one size made the other."""
    if what == "channels":
        return [shape[:1] + [wanted] + shape[2:], [wanted] + shape[1:]] if fed else []
    if what == "sizes":
        return [shape[:i] + [new] + shape[i + 1:] for i, d in enumerate(shape) for old, new in ((got, wanted), (wanted, got))
                if d == old and i > 0]
    found = [shape[:-1] + [wanted]] if fed else []
    scaled = shape[2:] if len(shape) >= 3 else shape[1:]
    if scaled and got > 0:
        factor = (wanted / got) ** (1 / len(scaled))
        for step in (0, 1, -1, 2, -2, 3, -3, 4, -4):
            found.append(shape[:len(shape) - len(scaled)] + [max(1, round(d * factor) + step) for d in scaled])
    return found


def _runs(model, shape: list[int], like) -> bool:
    """Whether ``model`` runs eagerly on an input of ``shape`` (``like``'s dtype)."""
    import torch

    x = torch.rand(shape, dtype=like.dtype) if like.is_floating_point() else torch.zeros(shape, dtype=like.dtype)
    try:
        with torch.no_grad():
            model(x)
        return True
    except Exception:  # noqa: BLE001 - it does not run at that shape
        return False


def _runnable_shape(model, example: tuple, fed: bool, found: tuple) -> list[int] | None:
    """The first of ``_candidates`` the model runs at, tried eagerly (a few, for a few
    seconds at most): only a shape seen to run is suggested."""
    import torch

    if len(example) != 1 or not isinstance(example[0], torch.Tensor):
        return None
    given = list(example[0].shape)
    start, tried = time.perf_counter(), 0
    for shape in _candidates(given, fed, *found[:3]):
        if shape == given or math.prod(shape) > _TRY_ELEMENTS:
            continue
        if tried >= _TRIES or time.perf_counter() - start > _TRY_SECONDS:
            break
        tried += 1
        if _runs(model, shape, example[0]):
            return shape
    return None


def shape_mismatch(model, example: tuple) -> tuple[str, str] | None:
    """(message, fix) when ``model`` fails on ``example`` because a layer is given another
    size than it takes: the layer by name, what it takes and what it got from the
    ``--input-shape``, and an input shape the model was seen to run at, if one was found."""
    import torch

    failed = failing_layer(model, example)
    found = failed and _mismatch(failed[1], failed[2], str(failed[3]))
    if not found:
        return None
    name, module, args, _ = failed
    what, wanted, got, dim = found
    given = " ".join(f"--input-shape {','.join(map(str, x.shape))}" for x in example if isinstance(x, torch.Tensor))
    layer = f"layer '{name}' ({type(module).__name__})" if name else "forward"
    if what == "sizes":
        said = f"the model's {layer} combines sizes {got} and {wanted} at dimension {dim}, which must match, from {given}"
    else:
        said = f"the model's {layer} takes {wanted} {what if wanted != 1 else what[:-1]} but got {got} from {given}"
    fed = bool(args) and isinstance(args[0], torch.Tensor) and len(example) == 1 and args[0].shape == example[0].shape
    shape = _runnable_shape(model, example, fed, found)
    fix = "give the input shape the model was built for" + (
        f" (--input-shape {','.join(map(str, shape))} runs it)" if shape else "")
    return said, fix


def reference_inputs(spec: ModelSpec, config: ExportConfig) -> tuple[list[tuple], str | None]:
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
    spec: ModelSpec, config: ExportConfig, work_dir: Path, model=None, on_stage=None, variants: tuple = (),
    main: bool = True,
) -> Capture:
    """Export ``spec`` once; save the program and the eager reference outputs.

    ``variants`` are (backend, precision) pairs whose backend transforms the eager
    model before capture; each is captured once more, after its transform. Without
    ``main``, only those (a job of their own, after the main capture's).
    """
    from ..run.workers import one_thread

    with one_thread():
        return _capture(spec, config, work_dir, model, variants, main)


def _capture(spec: ModelSpec, config: ExportConfig, work_dir: Path, model, variants: tuple, main: bool) -> Capture:
    import torch

    from ..core.io import check_writable_tmp
    from ..models.custom import reference_model

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
        raise _capture_failure(exc, model, spec, inputs[0]) from exc
    if not exported.graph_signature.user_outputs:  # None, a number: a program with no output cannot be saved
        raise CaptureError("the model returns no tensor, so its program would have no output",
                           fix="return from forward() the tensors an app reads")
    _check_not_broadcast(exported, spec)
    timings[Stage.CAPTURE.value] = time.perf_counter() - t0

    t0 = time.perf_counter()
    reference = {"inputs": [list(x) for x in inputs], **({"inputs_from": inputs_from} if inputs_from else {})}
    eager = reference_model(spec, model)
    with torch.no_grad():
        try:
            reference["outputs"] = [flatten_outputs(eager(*x)) for x in inputs]
        except Exception as exc:
            if (fix := _capture_fix(model, inputs[0])) is None:
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
                   fp32_bytes=fp32_bytes(exported))


def fp32_bytes(exported) -> int:
    """The bytes of ``exported``'s weights, buffers and constants with every float at fp32."""
    import torch

    tensors = [*exported.state_dict.values(), *exported.constants.values()]
    return sum(t.numel() * (4 if t.is_floating_point() else t.element_size())
               for t in tensors if isinstance(t, torch.Tensor))


def _capture_failure(exc: BaseException, model, spec: ModelSpec, example: tuple) -> CaptureError:
    """What torch.export raised, as one line and its fix: what pteforge sees of the cause
    (``_capture_fix``), a layer given another size than it takes (``shape_mismatch``), or
    torch.export's own sentence and the inputs' shapes."""
    fix = _capture_fix(model, example)
    if fix is None and (mismatch := shape_mismatch(model, example)):
        return CaptureError(mismatch[0], fix=mismatch[1])
    fix = fix or FILE_FIX.get(spec.source, "see https://pytorch.org/docs/stable/export.html")
    given = ", ".join(f"{tuple(x.shape)}" for x in example if hasattr(x, "shape"))
    return CaptureError(f"{summarize_export_error(exc, spec.source)} (inputs of shape {given})", fix=fix)


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
    import copy

    from torchao.quantization import quantize_

    from ..backends import default_registry

    config = default_registry().get(backend).source_transform(precision)
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

    from ..runtime.pte import output_names

    if isinstance(model, torch.jit.ScriptModule):
        return _converted(model, example)
    with torch.no_grad():
        exported = torch.export.export(model, example)
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

        TensorOutputs.forward.__signature__ = _positional_signature(model, len(example))

        return torch.export.export(TensorOutputs(), example)


def _positional_signature(model, count: int):
    """``forward(self, <the model's first count arguments>)``, so a wrapper's inputs keep
    the model's argument names; ``forward(self, *args)`` when they are not plain
    positional arguments."""
    import inspect

    from ..models.custom import forward_signature

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
    import warnings

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
    defaults (``models.custom.given_arguments``); what TorchScript's converter would fail on
    far from the cause (an argument without a default that is no tensor, or that no tensor
    is given for) is refused in one line naming it."""
    from ..core.errors import PteforgeError
    from ..core.spec import InputSpec
    from ..models.custom import forward_arguments, given_arguments, torchscript_inputs

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
    from ..families import model_input
    from ..app.vision import shipped_images, takes_images

    if not takes_images(spec):
        return {}
    photos = shipped_images()
    images = [[model_input(p, spec)] for p in photos]
    outputs = [flatten_outputs(model(*x)) for x in images]
    if outputs and spec.source != "catalog":
        _check_labels(spec, outputs[0])
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
    from ..core.errors import UsageError

    found = broadcast_input(exported)
    if found is None:
        return
    name, dim, _, took = found
    given = ",".join(str(d) for d in (spec.fed[0].shape if len(spec.fed) == 1 else ()))
    wanted = ",".join(str(d) for d in took)
    raise UsageError(f"--input-shape {given or name}: the model's first layer takes {took[dim]} at dim {dim} of input "
                     f"'{name}' (shape {wanted}) and only broadcasts the 1 given there, so the manifest would tell the "
                     f"app to feed 1 where the model computes on {took[dim]}", fix=f"give --input-shape {wanted}")


def _check_labels(spec: ModelSpec, outputs: list) -> None:
    """A model of one's own given a task (``--task``): its output scores as many classes as
    its labels name (``--labels-file``, or its family's)."""
    from ..core.errors import ModelError
    from ..families import family

    fam = family(spec.family)
    try:
        scored = fam.output_classes(outputs)
    except Exception:  # noqa: BLE001 - an output the family cannot read: its decoding says so later
        return
    named = len(spec.names) if spec.names else len(fam.label_names()) if fam.labels_file and scored else None
    if scored is not None and named is not None and scored != named:
        where = "--labels-file" if spec.names else f"the {fam.category} family's {fam.labels_file}"
        raise ModelError(f"{spec.name}'s output scores {scored} classes, and {where} names {named}",
                         fix="give --labels-file with one class per line, as many as the model scores")


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
