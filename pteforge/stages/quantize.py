"""Reduced precision of a captured program: PT2E quantization with calibration, and fp16."""

from __future__ import annotations

import io
from pathlib import Path

from ..models.synthetic import make_inputs
from ..spec import ExportConfig, ModelSpec


def calibration_set(spec: ModelSpec, config: ExportConfig) -> tuple[list[tuple], dict]:
    """``config.calibration_samples`` input tuples and what they were.

    Image models get real photos through the model's own preprocessing: the images
    in ``--calibration DIR`` (sorted, the first N), or by default seeded random views
    of the photos our dependencies ship, for half the samples. The rest are seeded
    synthetic inputs, whose seeds lie far from the verification inputs'.
    """
    from ..vision import image_views, images_in, model_input, shipped_images, takes_images

    n = max(config.calibration_samples, 1)
    batches: list[tuple] = []
    facts: dict = {"samples": n}
    if takes_images(spec):
        if config.calibration_dir:
            paths = images_in(Path(config.calibration_dir))[:n]
            batches = [(model_input(p, spec),) for p in paths]
            facts["source"] = f"--calibration {config.calibration_dir}"
        else:
            photos = shipped_images()
            want = n // 2
            views = [v for i, p in enumerate(photos) for v in image_views(p, -(-want // len(photos)), config.seed + i)] if photos else []
            batches = [(model_input(v, spec),) for v in views[:want]]
            facts["source"] = "views of the photos dependencies ship (" + ", ".join(p.name for p in photos) + ") + seeded synthetic"
    else:
        facts["source"] = "seeded synthetic"
    facts["images"] = len(batches)
    synthetic = n - len(batches)
    batches += [make_inputs(spec, 10_000 + config.seed * 997 + i) for i in range(synthetic)]
    facts["synthetic"] = synthetic
    return batches, facts


def quantize(exported, plan, batches: list[tuple], example: tuple):
    """prepare_pt2e → calibrate → convert_pt2e (or the backend's own flow) → torch.export again."""
    return quantize_shared(exported, plan, batches, example, None)[0]


def quantize_shared(exported, plan, batches: list[tuple], example: tuple, shared: Path | None):
    """``quantize``, once per prepared program: (the quantized program, its fingerprint or None).

    ``shared``: a directory every target of this model's run sees. A target whose
    quantizer prepares a program already quantized there (same ``fingerprint``) loads
    it instead of calibrating and converting again; one that quantizes saves its result
    there. Nothing waits: two targets preparing the same program side by side each
    quantize it (waiting would leave a core idle for as long as quantizing takes).
    Either way the program is the same (tested: the same .pte bytes).

    ``module(check_guards=False)``: under torch 2.13 the Arm quantizer fails on the
    guard nodes that ``module()`` inserts.
    """
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    module = exported.module(check_guards=False)
    if plan.quantize is not None:
        with torch.no_grad():
            return torch.export.export(plan.quantize(module, batches), example), None
    prepared = prepare_pt2e(module, plan.quantizer)
    key = fingerprint(prepared, batches) if shared is not None else None
    path = shared / f"{key}.pt2" if key else None
    if path is not None and path.is_file():
        return torch.export.load(str(path)), key
    with torch.no_grad():
        for batch in batches:
            prepared(*batch)
    quantized = torch.export.export(convert_pt2e(prepared), example)
    if path is not None:
        from filelock import FileLock, Timeout

        from ..io import write_atomic

        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(path) + ".lock", blocking=False):  # the other one is saving the same program
                if not path.is_file():
                    buffer = io.BytesIO()
                    torch.export.save(quantized, buffer)
                    write_atomic(path, buffer.getvalue())
        except Timeout:
            pass
    return quantized, key


class _Unstable(Exception):
    """A value without a stable description (an object known only by its address)."""


def fingerprint(prepared, batches: list[tuple]) -> str | None:
    """What calibrating and converting ``prepared`` depends on, hashed: its graph code,
    every tensor in it (weights, observer state) and every observer's configuration
    (dtype, range, scheme, derived-qparams functions by name, code and closure), plus
    the calibration inputs. Equal fingerprints give the same quantized program; a value
    that cannot be described stably (an object known only by its address) gives None,
    and that target quantizes on its own.

    On mobilenet_v3_small the TOSA, Ethos-U55 and Ethos-U85 quantizers prepare the same
    program (their specs differ in features the model does not use), Cortex-M's another.
    """
    import hashlib

    names = {id(mod): name for name, mod in prepared.named_modules()}
    h = hashlib.sha256()
    try:
        for name, mod in prepared.named_modules():
            h.update(f"\n{name}:{_describe(mod, names, top=True)}".encode())
        for batch in batches:
            h.update(_describe(list(batch), names).encode())
    except _Unstable:
        return None
    return h.hexdigest()[:20]


_SKIP = ("_modules", "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
         "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
         "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called")


def _describe(value, names: dict, top: bool = False, depth: int = 0) -> str:
    import enum
    import functools
    import hashlib
    import types

    import torch

    if depth > 8:
        raise _Unstable

    def d(v):
        return _describe(v, names, depth=depth + 1)

    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.dtype, torch.qscheme, torch.device,
                                           enum.Enum)):
        return repr(value)
    if isinstance(value, torch.Tensor):
        try:
            # a copy: numpy() makes the storage it sees non-resizable, and observers resize theirs
            raw = value.detach().cpu().clone().reshape(-1).view(torch.uint8).numpy().tobytes()
        except (RuntimeError, TypeError):  # a quantized or sparse tensor
            raise _Unstable from None
        return f"T({value.dtype},{tuple(value.shape)},{hashlib.sha256(raw).hexdigest()[:16]})"
    if isinstance(value, torch.nn.Module):
        if not top:
            if id(value) not in names:
                raise _Unstable
            return f"<{names[id(value)]}>"  # described where it sits in the module tree
        if isinstance(value, torch.fx.GraphModule):  # its code and its tensors (weights, constants)
            tensors = {k: v for k, v in vars(value).items() if isinstance(v, torch.Tensor)}
            return f"GraphModule({value.code},{d(dict(value._parameters))},{d(dict(value._buffers))},{d(tensors)})"
        attrs = {k: v for k, v in vars(value).items() if k not in _SKIP and k != "training"}
        return f"{type(value).__module__}.{type(value).__qualname__}{d(attrs)}"
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(d(v) for v in value) if isinstance(value, (set, frozenset)) else [d(v) for v in value]
        return f"{type(value).__name__}[{','.join(items)}]"
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{d(k)}:{d(v)}" for k, v in value.items())) + "}"
    if isinstance(value, functools.partial):
        return f"partial({d(value.func)},{d(value.args)},{d(value.keywords)})"
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    if isinstance(value, (types.FunctionType, types.MethodType)):
        if isinstance(value, types.MethodType):
            return f"method({d(value.__func__)},{d(value.__self__)})"
        cells = [c.cell_contents for c in value.__closure__ or ()]
        return f"fn({value.__module__}.{value.__qualname__},{_code(value.__code__)},{d(cells)},{d(value.__defaults__)})"
    if isinstance(value, types.BuiltinFunctionType):
        return f"builtin({getattr(value, '__module__', '')}.{value.__qualname__})"
    if hasattr(value, "__dict__"):
        return f"{type(value).__module__}.{type(value).__qualname__}{d(vars(value))}"
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        raise _Unstable
    return f"{type(value).__qualname__}:{text}"


def _code(code) -> str:
    """A code object's bytecode and constants, nested functions' too (not their addresses)."""
    import hashlib
    import types

    consts = [_code(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return hashlib.sha256(code.co_code + repr(consts).encode()).hexdigest()[:16]


def half_program(exported, example: tuple):
    """The captured program with fp16 weights and compute, keeping fp32 inputs and
    outputs: an app feeds the same tensors as for fp32, and the casts at the edges
    run in the delegate."""
    import copy

    import torch

    class Half(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = copy.deepcopy(inner).to(torch.float16)

        def forward(self, *args):
            out = self.inner(*[a.half() if a.is_floating_point() else a for a in args])
            if isinstance(out, torch.Tensor):
                return out.float() if out.is_floating_point() else out
            return tuple(o.float() if o.is_floating_point() else o for o in out)

    return torch.export.export(Half(exported.module(check_guards=False)), example)
