"""One upstream pass crash does not cost the whole target.

A backend's lowering runs its own passes on each partition its partitioner tagged
(XNNPACK's ``ChannelsLastTaggedReshapePass`` on an image operator whose input is not 4-D,
such as a max pool fed one unbatched image: "Attempting to convert non-NHWC compatible
node to NHWC"). When one raises,
the lowering is tried again with parts of that partitioner's partitions delegated, to find
the smallest part that still fails: whole partitions first, then contiguous runs of a
partition's nodes in graph order (a run of a convex partition is convex, so each is a valid
partition of its own). That part is left to the portable kernels, the rest stays
delegated, and the artifact says what was left out and the upstream error.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from ..core.errors import one_line

log = logging.getLogger(__name__)

MAX_LOWERINGS = 24  # tries, all searches together: a model whose crashes will not narrow keeps its first error


@dataclass
class Cut:
    """Which nodes each partitioner (by its place in the chain) may delegate, and what
    the partitioners did in the last lowering."""

    excluded: dict[int, set[str]] = field(default_factory=dict)  # left to the portable kernels, for good
    trial: tuple[int, list[list[str]]] | None = None  # (partitioner, the only runs it delegates) while searching
    last: int | None = None  # the partitioner that partitioned last (where a crash in lowering comes from)
    partitions: dict[int, list[list[str]]] = field(default_factory=dict)  # each one's partitions, as first made
    names: list[str] = field(default_factory=list)  # each partitioner's class

    def guard(self, partitioners: list) -> list:
        """``partitioners``, each wrapped to delegate what this cut lets it."""
        guarded, partitioner = _guarded_class()
        self.names = [type(p).__name__ for p in partitioners]
        return [guarded(p, i, self) if isinstance(p, partitioner) else p for i, p in enumerate(partitioners)]


@functools.cache
def _guarded_class():
    from executorch.exir.backend.partitioner import Partitioner, PartitionResult

    class Guarded(Partitioner):
        """A partitioner that tags what ``inner`` tags, less what ``cut`` leaves out."""

        def __init__(self, inner, index: int, cut: Cut):
            super().__init__()
            self.inner, self.index, self.cut = inner, index, cut

        def __getattr__(self, name):  # what a backend reads off its own partitioner
            return getattr(self.__dict__["inner"], name)

        def ops_to_not_decompose(self, ep):
            return self.inner.ops_to_not_decompose(ep)

        def transform_for_pre_decomposition(self, ep):
            return self.inner.transform_for_pre_decomposition(ep)

        def partition(self, ep):
            cut = self.cut
            cut.last = self.index
            result = self.inner.partition(ep)
            tags = result.partition_tags
            graph = result.tagged_exported_program.graph
            runs: dict[str, list[str]] = {}
            for node in graph.nodes:
                tag = node.meta.get("delegation_tag")
                if tag in tags:
                    runs.setdefault(tag, []).append(node.name)
            cut.partitions.setdefault(self.index, list(runs.values()))
            excluded = cut.excluded.get(self.index, set())
            only = cut.trial[1] if cut.trial and cut.trial[0] == self.index else None
            if not excluded and only is None:
                return result
            place = {name: i for i, run in enumerate(only) for name in run} if only is not None else {}
            kept: dict = {}
            piece: dict[str, int] = {}  # per partition: which piece of it, as left-out nodes cut it
            in_gap: set[str] = set()
            for node in graph.nodes:
                tag = node.meta.get("delegation_tag")
                if tag not in tags:
                    continue
                if node.name in excluded or (only is not None and node.name not in place):
                    del node.meta["delegation_tag"]
                    in_gap.add(tag)
                    continue
                if tag in in_gap:  # the nodes after a gap are a partition of their own (a run of a
                    in_gap.discard(tag)  # convex partition, in graph order, is convex)
                    piece[tag] = piece.get(tag, 0) + 1
                new = f"{tag}_{piece.get(tag, 0)}_{place.get(node.name, 0)}"
                node.meta["delegation_tag"] = new
                kept[new] = tags[tag]
            return PartitionResult(tagged_exported_program=result.tagged_exported_program, partition_tags=kept)

    return Guarded, Partitioner


def lower_leaving_out(attempt, cut: Cut, first: BaseException):
    """After ``attempt()`` (a lowering under ``cut``) raised ``first``: leave out of the
    crashing partitioner's partitions the smallest failing part, found by bisection, until
    a lowering succeeds. Returns (its result, what was left out); raises ``first`` when
    no part can be isolated."""
    tries = 0
    left_out: list[dict] = []
    error = first
    while cut.last is not None:
        index = cut.last
        runs = [[n for n in run if n not in cut.excluded.get(index, set())] for run in cut.partitions.get(index, [])]
        runs = [r for r in runs if r]

        def fails(only: list[list[str]]) -> BaseException | None:
            nonlocal tries
            tries += 1
            if tries > MAX_LOWERINGS:
                raise first
            cut.trial = (index, only)
            try:
                attempt()
                return None
            except Exception as exc:  # noqa: BLE001 - this crash again, of this partitioner's lowering; another
                # (a quantized operator cut from its dequantize: "Weight and Input should both be quantized")
                # says that this part is no partition of its own, not where the crash is
                return exc if cut.last == index and one_line(exc, 300) == one_line(error, 300) else None
            finally:
                cut.trial = None

        part = _smallest_failing(runs, fails)
        if not part:
            raise first
        cut.excluded.setdefault(index, set()).update(part)
        left_out.append({"partitioner": cut.names[index] if index < len(cut.names) else str(index), "nodes": part,
                         "error": one_line(error, 300)})
        log.info("left %d node(s) of partitioner %d to the portable kernels: %s", len(part), index, one_line(error, 200))
        tries += 1
        if tries > MAX_LOWERINGS:
            raise first
        try:
            return attempt(), left_out
        except Exception as exc:  # noqa: BLE001 - another part crashes: narrow it down in turn
            error = exc
    raise first


def _smallest_failing(runs: list[list[str]], fails) -> list[str]:
    """The smallest part of ``runs`` (a partitioner's partitions, as node names in graph
    order) whose lowering alone ``fails``: a partition, then a contiguous run of its nodes.
    Empty when lowering none of them fails the same way: the crash is not in them (a
    failure outside this partitioner's partitions costs one lowering more, not a search)."""
    if not runs or fails([]) is not None:
        return []
    while True:
        if len(runs) == 1:
            run = runs[0]
            if len(run) == 1:
                return run
            halves = [[run[: len(run) // 2]], [run[len(run) // 2:]]]
        else:
            halves = [runs[: len(runs) // 2], runs[len(runs) // 2:]]
        failing = next((half for half in halves if fails(half) is not None), None)
        if failing is None:  # each half lowers alone, not together: leave out the pair
            return [name for run in runs for name in run]
        runs = failing
