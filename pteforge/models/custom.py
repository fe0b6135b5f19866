"""User models: ``package.module:factory`` or a ``torch.export.save`` file (.pt2)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from ..errors import ModelError, UsageError, one_line
from ..spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, InputSpec, ModelSpec


def factory_spec(ref: str, inputs: tuple[InputSpec, ...], name: str | None = None) -> ModelSpec:
    module, sep, func = ref.partition(":")
    if not sep or not module or not func:
        raise UsageError(
            f"malformed --model '{ref}'",
            fix="write --model package.module:factory (a function returning an nn.Module) or --model file.pt2",
        )
    if not inputs:
        raise UsageError(
            f"--model {ref} needs its input shape",
            fix="add --input-shape 1,3,224,224 (repeat it for several inputs)",
        )
    return ModelSpec(
        name=name or func,
        family="custom",
        task="custom",
        inputs=inputs,
        factory=ref,
        source="factory",
    )


def build_factory(spec: ModelSpec, weights: str, seed: int):
    import torch

    module_name, _, func_name = spec.factory.partition(":")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ModelError(
            f"cannot import '{module_name}' for --model {spec.factory}: {type(exc).__name__}: {exc}",
            fix="check the module path; it must be importable from the current directory",
        ) from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise ModelError(
            f"'{module_name}' has no callable '{func_name}'",
            fix=f"define def {func_name}() -> torch.nn.Module in {module_name}",
        )
    torch.manual_seed(seed)
    try:
        model = factory()
    except Exception as exc:
        raise ModelError(
            f"factory {spec.factory} raised {one_line(exc)}",
            fix="fix the factory so that it returns an nn.Module",
        ) from None
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"factory {spec.factory} returned {type(model).__name__}, not a torch.nn.Module",
            fix="return the model instance (an nn.Module) from the factory",
        )
    if weights not in (WEIGHTS_PRETRAINED, WEIGHTS_NONE):
        from .weights import load_state_dict_file

        load_state_dict_file(model, weights)
    return model.eval()


def pt2_spec(path: str) -> ModelSpec:
    """A spec for a ``torch.export.save`` file; inputs come from the program itself."""
    import torch

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"model file '{path}' does not exist", fix="give the path of a .pt2 written by torch.export.save")
    try:
        ep = torch.export.load(str(p))
    except Exception as exc:
        raise ModelError(
            f"'{path}' is not a torch.export program ({type(exc).__name__})",
            fix="write it with torch.export.save(torch.export.export(model, inputs), 'model.pt2')",
        ) from None
    inputs = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in ep.graph_signature.user_inputs:
            val = node.meta.get("val")
            inputs.append(InputSpec(tuple(int(d) for d in val.shape), str(val.dtype).replace("torch.", "")))
    return ModelSpec(
        name=p.stem,
        family="custom",
        task="custom",
        inputs=tuple(inputs),
        factory="pteforge.models.custom:build_pt2",
        source="pt2",
        pt2_path=str(p.resolve()),
    )


def build_pt2(spec: ModelSpec, weights: str, seed: int):
    """The eager reference of a .pt2 is the program's own module."""
    import torch

    return torch.export.load(spec.pt2_path).module()
