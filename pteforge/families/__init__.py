"""Every task family pteforge knows, one file each, found rather than listed.

As with backends, the families are the modules of this package (``base`` and files
starting with ``_`` excepted): each :class:`Family` subclass a module defines with a
``category`` is one family. Third-party families come in through the entry-point group
``pteforge.families``. The catalog, the CLI's model flags, the config file's keys, the
labels files and ``validate``'s decoding all come from here.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

from ..core.registry import discover
from .base import CustomFamily, Family, Prepared

ENTRY_POINT_GROUP = "pteforge.families"
PLUGIN_ERRORS: list[str] = []

__all__ = ["Family", "Prepared", "families", "family", "catalog_specs", "labels_for"]


@lru_cache(maxsize=1)
def families() -> tuple[Family, ...]:
    """The catalog's families (built-in and plugins), in ``order``."""
    return tuple(cls() for cls in discover(__name__, __path__, Family, "category", ENTRY_POINT_GROUP, PLUGIN_ERRORS))


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
    from ..core.io import cache_root, keep

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
