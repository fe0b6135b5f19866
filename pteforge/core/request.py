"""What ``pteforge export`` is asked for: the request, typed, as the command line (and its
config file) or a library caller gives it, before anything is resolved.

Its fields are the export options whose role is ``REQUEST`` (``options.py``), by the same
names, and the few options of another role the request reads too (``ALSO_READ``); the
task families' words (``--mobilenet``, ``--yolo-pose``: their models) are in ``families``,
as the registry knows them, not this module. ``tests/test_request.py`` checks the fields
against the declarations. This module imports nothing above ``core``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

# options of another role (ARTIFACT, RUN) the request reads too: --calibration's photos are
# checked while the request is resolved (a note on the files that are not images), and
# --base-url is publish's default (``api.check_surroundings``)
ALSO_READ = ("calibration", "calibration_samples", "base_url")

T = TypeVar("T")


@dataclass(frozen=True)
class ExportRequest:
    """One export's request: which models, which targets, what to publish and tell."""

    families: dict[str, list[str] | None] = field(default_factory=dict)  # word -> names ([]: its default; None: not asked)
    # models
    all: bool = False
    model: list[Any] = field(default_factory=list)  # --model refs, or a config file's [[model]] tables
    llm: list[str] = field(default_factory=list)
    max_seq_len: int | None = None
    llm_cache: str | None = None
    input_shape: list[Any] = field(default_factory=list)
    input_dtype: list[str] = field(default_factory=list)
    labels: bool = False
    # your own model, as the app shows it
    task: str | None = None
    name: str | None = None
    labels_file: str | None = None
    mean: str | None = None
    std: str | None = None
    fit: str | None = None
    # targets and precision
    target: str | None = None
    backends: list[str] | None = None
    precision: str | None = None
    accuracy_report: bool = False
    # output
    dry_run: bool = False
    archive_limit_gb: float | None = None
    # publishing
    publish: str | None = None
    publish_runtime: list[str] | None = None
    publish_base_url: str | None = None
    publish_relative: bool | None = None
    # read too (ALSO_READ)
    calibration: str | None = None
    calibration_samples: int = 16
    base_url: str | None = None

    @classmethod
    def from_options(cls, values: dict, words: Iterable[str] = ()) -> ExportRequest:
        """The request from option values by name (the parsed command line, config file
        included); ``words``: the task families' destinations (``yolo_pose``)."""
        given = {f.name: values[f.name] for f in fields(cls) if f.name != "families" and values.get(f.name) is not None}
        return cls(families={w: values.get(w) for w in words}, **given)


def first_duplicate(items: Sequence[T], name: Callable[[T], str | None],
                    counted: Callable[[T, T], bool] | None = None) -> tuple[int, int] | None:
    """(first, later): the indexes of the first two of ``items`` that differ and share a
    name (None: no name), which would write the same files and manifest entries; None when
    there are none. ``counted``: whether such a pair is this caller's to refuse (the config
    file leaves two plain ``--model`` strings to the export). The one check of duplicate
    model names, for the config file's entries (``ui.config``) and the run's models
    (``run.checks``)."""
    names = [name(item) for item in items]
    for later, n in enumerate(names):
        first = next((i for i in range(later) if n and names[i] == n and items[i] != items[later]), None)
        if first is not None and (counted is None or counted(items[first], items[later])):
            return first, later
    return None
