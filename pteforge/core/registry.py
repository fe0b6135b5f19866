"""A small typed registry: register, get, all — with helpful errors.

A duplicate registration names both parties; an unknown name answers with the
valid names and the closest match (as hatchling's ``ClassRegister`` and
ExecuTorch's recipe registry do). Build a fresh ``Registry()`` wherever
isolation matters: there is no global state to reset.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from .errors import UnknownNameError, one_line

T = TypeVar("T")


def closest(name: str, choices: Iterable[object], cutoff: float = 0.5) -> str | None:
    """The one of ``choices`` closest to ``name``, if one is close (difflib's ratio ≥ ``cutoff``)."""
    found = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=cutoff)
    return found[0] if found else None


def unknown_name_message(kind: str, name: str, choices: list[str]) -> str:
    hint = closest(name, choices)
    did_you_mean = f" Did you mean '{hint}'?" if hint else ""
    return f"unknown {kind} '{name}'.{did_you_mean} Available: {', '.join(choices)}"


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, item: T, aliases: tuple[str, ...] = ()) -> T:
        for key in (name, *aliases):
            if key in self._items or key in self._aliases:
                owner = self._aliases.get(key, key)
                raise ValueError(
                    f"{self.kind} '{key}' is already registered by {self._items[owner]!r}; "
                    f"refusing to register {item!r} under the same name"
                )
        self._items[name] = item
        for alias in aliases:
            self._aliases[alias] = name
        return item

    def resolve(self, name: str) -> str:
        key = name.strip().lower().replace("_", "-") if name not in self._items else name
        for candidate in (name, key, key.replace("-", "_")):
            if candidate in self._items:
                return candidate
            if candidate in self._aliases:
                return self._aliases[candidate]
        raise UnknownNameError(unknown_name_message(self.kind, name, self.names()))

    def get(self, name: str) -> T:
        return self._items[self.resolve(name)]

    def __contains__(self, name: str) -> bool:
        try:
            self.resolve(name)
        except UnknownNameError:
            return False
        return True

    def names(self) -> list[str]:
        return list(self._items)

    def all(self) -> list[T]:
        return list(self._items.values())

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)


def entry_point_classes(group: str, base: type, errors: list[str]) -> list[type]:
    """The ``base`` subclasses that third-party packages declare in entry-point ``group``;
    one that fails to load is appended to ``errors`` ("name (value): why"), not raised:
    one broken plugin must not break the tool."""
    found: list[type] = []
    for ep in entry_points(group=group):
        try:
            obj = ep.load()
            if not (isinstance(obj, type) and issubclass(obj, base)):
                raise TypeError(f"{ep.value} is not a {base.__module__}.{base.__name__} subclass")
            found.append(obj)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"{ep.name} ({ep.value}): {one_line(exc)}")
    return found


def discover(package: str, path: Iterable[str] | None, base: type, key: str, group: str, errors: list[str]) -> list[type]:
    """Every ``base`` subclass that names its own ``key`` (``name``, ``category``): those
    the modules of ``package`` define (``base``, modules starting with ``_`` and folders excepted),
    then those third-party packages declare in entry-point ``group`` (a broken one goes
    into ``errors``); in ``order``, then ``key``. One file is one plugin."""
    errors.clear()
    found: list[type] = []
    for info in pkgutil.iter_modules(path):
        if info.name.startswith("_") or info.name == "base" or info.ispkg:  # a folder is a toolkit, not a plugin
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        found += [obj for obj in vars(module).values()
                  if isinstance(obj, type) and issubclass(obj, base) and obj.__module__ == module.__name__
                  and isinstance(vars(obj).get(key), str)]
    found += entry_point_classes(group, base, errors)
    return sorted(dict.fromkeys(found), key=lambda cls: (getattr(cls, "order"), getattr(cls, key)))
