"""Why a capture failed, in the user's terms: torch.export's error as one line, what
pteforge sees of its cause (a data-dependent shape, a rank or dtype the model does not
take, a layer given another size than it takes, with a shape that runs) and the fix, in the
terms of where the model came from (a file has no ``forward()`` to rewrite)."""

from __future__ import annotations

import math
import re
import time

from ..core.errors import CaptureError
from ..core.spec import ModelSpec

_TRIES, _TRY_SECONDS, _TRY_ELEMENTS = 9, 30.0, 1 << 26  # the shapes tried eagerly before one is suggested

# What a data-dependent capture means, in the terms of where the model came from: a user
# who gave a file has no forward() to rewrite. Looked up by a spec's source: None for a catalog model.
DATA_DEPENDENT: dict[str | None, str] = {
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
        hint = " — forward() takes another number of inputs than were given"
    return f"torch.export failed ({name}): {key[:240]}{hint}"


def capture_fix(model, example: tuple, exc: BaseException | None = None) -> str | None:
    """What to change when a model cannot be captured or run (raising ``exc``, where known)
    for a reason pteforge can see: weights quantized by torch.ao's eager mode (packed
    weights torch.export cannot trace), weights of another float dtype than the inputs'
    (``_dtype_fix``), an input of the wrong rank for the first convolution (``_rank_fix``),
    float values fed to an embedding (``_ids_fix``), or seeded ids past what the model
    indexes with them (``_vocabulary_fix``)."""
    import torch

    if isinstance(model, torch.nn.Module) and any(
            type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
        return ("the model is already quantized by torch.ao's eager mode, whose packed weights torch.export cannot "
                "capture: give the float model, and a quantized target (e.g. xnnpack:int8), which pteforge quantizes "
                "with PT2E and calibrates")
    return (_arity_fix(model, example) or _dtype_fix(model, example) or _rank_fix(model, example)
            or _ids_fix(model, example) or _vocabulary_fix(model, example, exc))


def _arity_fix(model, example: tuple) -> str | None:
    """When forward() takes more or fewer tensors than there are inputs: its parameters
    by name, and the ``--input-shape`` flags in their order (the shapes given, ``SHAPE``
    for one still to give)."""
    import inspect

    import torch

    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return None
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = [p.name for p in positional if p.default is p.empty]
    if len(needed) <= len(example) <= len(positional):
        return None
    given = [("" if x.dtype == torch.float32 else f"{str(x.dtype).removeprefix('torch.')}:") + ",".join(map(str, x.shape))
             for x in example if isinstance(x, torch.Tensor)]
    names = needed if len(example) < len(needed) else [p.name for p in positional]
    flags = " ".join(f"--input-shape {given[i] if i < len(given) else 'SHAPE'}" for i in range(len(names)))
    takes = f"{len(needed)}" if len(needed) == len(positional) else f"{len(needed)} to {len(positional)}"
    return (f"forward({', '.join(p.name for p in positional)}) takes {takes} input(s) and {len(example)} "
            f"{'was' if len(example) == 1 else 'were'} given: give one --input-shape per input, in forward's order "
            f"({', '.join(names)}): {flags}")


def _rank_fix(model, example: tuple) -> str | None:
    """When the model's first convolution is fed the input as given and that input's rank
    is not the convolution's (a 3-number --input-shape for a Conv2d): the rank it expects."""
    import torch

    convs = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
             torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)
    found = _first_fed(model, example, convs)
    if found is None:
        return None
    module, name, at = found
    got = example[at]
    spatial = len(module.kernel_size)
    if got.dim() == spatial + 2:
        return None
    dims = ",".join(["1", str(module.in_channels), *{1: ["L"], 2: ["H", "W"], 3: ["D", "H", "W"]}[spatial]])
    return (f"the model's first layer, {name} ({type(module).__name__}), takes {spatial + 2} "
            f"dimensions (batch, {module.in_channels} channels, {spatial} spatial) and the input given has {got.dim()} "
            f"({tuple(got.shape)}): give --input-shape {dims}")


def _first_fed(model, example: tuple, kinds: tuple) -> tuple | None:
    """(module, its name, the input's position) of the first module of ``kinds`` an eager run
    of ``model`` on ``example`` feeds one of the inputs as given; None when none is."""
    import torch

    if not isinstance(model, torch.nn.Module) or isinstance(model, torch.jit.ScriptModule):
        return None
    first: list = []

    def seen(module, args):
        if not first and args and isinstance(args[0], torch.Tensor):
            first.append((module, args[0]))

    named = {m: n for n, m in model.named_modules()}
    handles = [m.register_forward_pre_hook(seen) for m in named if isinstance(m, kinds)]
    try:
        with torch.no_grad():
            model(*example)
    except Exception:  # noqa: BLE001 - it fails: the hook has seen what the first one got
        pass
    finally:
        for h in handles:
            h.remove()
    if not first:
        return None
    module, got = first[0]
    # the input itself, or a copy of it (``x.float()``), not something the model computed
    at = next((i for i, x in enumerate(example) if x is got), None)
    if at is None:
        at = next((i for i, x in enumerate(example) if isinstance(x, torch.Tensor) and x.shape == got.shape), None)
    return None if at is None else (module, named[module] or "the model", at)


def _ids_fix(model, example: tuple) -> str | None:
    """When an input given as floats goes straight into an embedding, which takes integer
    ids: the dtype to give it, and the ids its table holds."""
    import torch

    found = _first_fed(model, example, (torch.nn.Embedding, torch.nn.EmbeddingBag))
    if found is None or not example[found[2]].is_floating_point():
        return None
    module, name, at = found
    given = example[at]
    flag = ",".join(map(str, given.shape))
    which = f"input {at}" if len(example) > 1 else "the input"
    return (f"{which} goes into {name} ({type(module).__name__} of {module.num_embeddings} ids), which takes integer "
            f"token ids, and it was given as {str(given.dtype).replace('torch.', '')}: give --input-shape "
            f"{'NAME=' if len(example) > 1 else ''}int64:{flag}")


def _vocabulary_fix(model, example: tuple, exc: BaseException | None = None) -> str | None:
    """When seeded ids (drawn below ``INTEGER_HIGH``) index past what the model holds: a
    small embedding table (a categorical feature of 3 levels) or, where ``exc`` says an
    index was out of bounds, any other lookup (ids shifted before a ``gather``), which
    no size in the graph bounds; real inputs to give instead."""
    import torch

    from ..models.synthetic import INTEGER_HIGH

    if not any(not x.is_floating_point() for x in example if isinstance(x, torch.Tensor)):
        return None
    small = [(name, m) for name, m in model.named_modules()
             if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.num_embeddings < INTEGER_HIGH] \
        if isinstance(model, torch.nn.Module) else []
    real = ("give real inputs with --calibration DIR (one .npy or .npz per sample, as many as --verify-inputs + "
            "calibration take); the verification runs on them too")
    if small:
        name, table = small[0]
        return (f"seeded ids are drawn in [0, {INTEGER_HIGH}) and {name or 'the model'} ({type(table).__name__}) "
                f"holds {table.num_embeddings}: {real}")
    if exc is not None and re.search(r"\bindex\b.*\bout of (bounds|range)\b", str(exc)):
        return f"seeded ids are drawn in [0, {INTEGER_HIGH}), more than the model indexes with them: {real}"
    return None


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
    if failed is None:
        return None
    found = _mismatch(failed[1], failed[2], str(failed[3]))
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


def capture_failure(exc: BaseException, model, spec: ModelSpec, example: tuple) -> CaptureError:
    """What torch.export raised, as one line and its fix: what pteforge sees of the cause
    (``capture_fix``), a layer given another size than it takes (``shape_mismatch``), or
    torch.export's own sentence and the inputs' shapes."""
    fix = capture_fix(model, example)
    if fix is None and (mismatch := shape_mismatch(model, example)):
        return CaptureError(mismatch[0], fix=mismatch[1])
    given = ", ".join(f"{tuple(x.shape)}" for x in example if hasattr(x, "shape"))
    said = summarize_export_error(exc, spec.source)
    # where torch.export's words say nothing of the cause (an internal assert), the model's own
    if fix is None and " — " not in said and (own := _eager_failure(model, example)):
        return CaptureError(f"the model itself fails on inputs of shape {given}: {own}",
                            fix="give the input shapes and dtypes the model was built for (--input-shape, --input-dtype)")
    fix = fix or FILE_FIX.get(spec.source, "see https://pytorch.org/docs/stable/export.html")
    return CaptureError(f"{said} (inputs of shape {given})", fix=fix)


def _eager_failure(model, example: tuple) -> str | None:
    """What ``model`` raises when it runs eagerly on ``example``, as its last line (a
    TorchScript program's error ends with the model's own sentence), or None when it runs."""
    import torch

    try:
        with torch.no_grad():
            model(*example)
    except Exception as exc:  # noqa: BLE001 - any error of the model's own code
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        said = lines[-1] if lines else type(exc).__name__
        return said.removeprefix("builtins.") if ":" in said else f"{type(exc).__name__}: {said}"
    return None


_ALLOCATE = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


def out_of_memory(exc: BaseException, spec: ModelSpec) -> CaptureError | None:
    """A capture that asked for more memory than there is, in one line that says how
    much and for which inputs: torch's allocator names the bytes in a C++ ``enforce
    fail`` line."""
    import psutil

    found = _ALLOCATE.search(str(exc))
    if found is None and not isinstance(exc, MemoryError):
        return None
    asked = f"{int(found[1]) / 1e9:,.1f} GB in one allocation" if found else "more memory than it could have"
    shapes = " ".join(f"--input-shape {','.join(map(str, i.shape))}" for i in spec.inputs) if spec.inputs else ""
    return CaptureError(
        f"building {spec.name}, its inputs or its reference outputs asked for {asked}; this machine has "
        f"{psutil.virtual_memory().total / 1e9:.0f} GB" + (f" (inputs: {shapes})" if shapes else ""),
        fix="give smaller input shapes (--input-shape), or export on a machine with more memory")
