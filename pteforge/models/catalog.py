"""The model catalog: every family's models (pteforge.families), each with what an app
needs to use it."""

from __future__ import annotations

from ..core.registry import Registry
from ..core.spec import ModelSpec
from ..families import catalog_aliases, catalog_specs


def build_catalog() -> Registry[ModelSpec]:
    registry: Registry[ModelSpec] = Registry("model")
    aliases = catalog_aliases()
    for spec in catalog_specs():
        registry.register(spec.name, spec, aliases=aliases.get(spec.name, ()))
    return registry
