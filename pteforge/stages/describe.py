"""Stable descriptions of what a step reads: modules, tensors, functions (by code and closure), containers.

Two equal descriptions mean equal inputs, so the step's result can be shared; a value
known only by its address (``<object at 0x...>``) raises ``Unstable``: not shared.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import types


class Unstable(Exception):
    """A value with no stable description."""


_SKIP = ("_modules", "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
         "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
         "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called")


def describe(value, names: dict | None = None, top: bool = False, depth: int = 0) -> str:
    """``value`` described; modules below the top one by their name in ``names`` ({id: name})."""
    import torch

    if depth > 8:
        raise Unstable

    def d(v):
        return describe(v, names, depth=depth + 1)

    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.dtype, torch.qscheme, torch.device,
                                           enum.Enum)):
        return repr(value)
    if isinstance(value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op({value})"
    if isinstance(value, torch.Tensor):
        try:
            # a copy: numpy() makes the storage it sees non-resizable, and observers resize theirs
            raw = value.detach().cpu().clone().reshape(-1).view(torch.uint8).numpy().tobytes()
        except (RuntimeError, TypeError):  # a quantized or sparse tensor
            raise Unstable from None
        return f"T({value.dtype},{tuple(value.shape)},{hashlib.sha256(raw).hexdigest()[:16]})"
    if isinstance(value, torch.nn.Module):
        if not top:
            if names is None or id(value) not in names:
                raise Unstable
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
        return f"fn({value.__module__}.{value.__qualname__},{code_digest(value.__code__)},{d(cells)},{d(value.__defaults__)})"
    if isinstance(value, types.BuiltinFunctionType):
        return f"builtin({getattr(value, '__module__', '')}.{value.__qualname__})"
    if hasattr(value, "__dict__"):
        return f"{type(value).__module__}.{type(value).__qualname__}{d(vars(value))}"
    text = repr(value)
    if " at 0x" in text or " object at " in text:
        raise Unstable
    return f"{type(value).__qualname__}:{text}"


def code_digest(code) -> str:
    """A code object's bytecode and constants, nested functions' too (not their addresses)."""
    consts = [code_digest(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts]
    return hashlib.sha256(code.co_code + repr(consts).encode()).hexdigest()[:16]
