"""Every task family pteforge knows, one file each, found rather than listed.

As with backends, the families are the modules of this package (``base`` and files
starting with ``_`` excepted): each :class:`Family` subclass a module defines with a
``category`` is one family. Third-party families come in through the entry-point group
``pteforge.families``. The catalog, the CLI's model flags, the config file's keys, the
labels files and ``validate``'s decoding all come from here.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from .base import CustomFamily, Family, Prepared

ENTRY_POINT_GROUP = "pteforge.families"
PLUGIN_ERRORS: list[str] = []

__all__ = ["Family", "Prepared", "families", "family", "catalog_specs", "labels_for"]


def _defined_in(module) -> list[type[Family]]:
    return [
        obj for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, Family) and obj.__module__ == module.__name__
        and isinstance(vars(obj).get("category"), str)
    ]


def _plugins() -> list[type[Family]]:
    from ..registry import entry_point_classes

    return entry_point_classes(ENTRY_POINT_GROUP, Family, PLUGIN_ERRORS)


@lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    """The catalog's families (built-in and plugins), in ``order``."""
    PLUGIN_ERRORS.clear()
    classes: list[type[Family]] = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_") and info.name != "base":
            classes += _defined_in(importlib.import_module(f"{__name__}.{info.name}"))
    classes += _plugins()
    ordered = sorted(dict.fromkeys(classes), key=lambda cls: (cls.order, cls.category))
    return tuple(cls() for cls in ordered)


def family(category: str | None) -> Family:
    """The family of a manifest category or a spec's ``family``; custom when unknown."""
    for fam in families():
        if fam.category == category:
            return fam
    return CustomFamily()


def catalog_specs() -> list:
    return [spec for fam in families() for spec in fam.specs()]


def catalog_aliases() -> dict[str, tuple[str, ...]]:
    return {name: names for fam in families() for name, names in fam.aliases.items()}


def labels_for(category: str) -> list[str]:
    """A family's label names, kept in the user cache per version of the library they come
    from (``labels_from``): reading them often imports torch or that library (~3 s)."""
    from importlib import metadata

    from ..io import cache_root
    from ..io import keep

    fam = family(category)
    source = fam.labels_from or "pteforge"
    path = cache_root() / "labels" / f"{category}-{source}-{metadata.version(source)}-{fam.labels_file}"
    try:
        return path.read_text().splitlines()
    except OSError:
        pass
    names = fam.label_names()
    keep(path, "\n".join(names) + "\n")
    return names


def model_input(image, spec):
    """One image (file or PIL image) → the model's input tensor, by its family's preprocessing."""
    return family(spec.family).prepare(image, spec).tensor
