"""Planning an export: the targets ``--backends``, ``--target`` and ``--precision`` ask for
(what cannot lower here sorted out), each model's own targets, and the jobs a run makes."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field

from ..app.platforms import targets_for
from ..app.precision import expand_auto, fp32_reference, with_references
from ..backends import default_registry
from ..core.errors import NoBackendError, UsageError
from ..core.registry import Registry
from ..core.result import Unavailable
from ..core.spec import ExportConfig, ModelSpec, Precision, Target, TargetRequest
from ..families import family
from ..runtime.host import host
from . import cache
from .sink import versions


@dataclass
class TargetPlan:
    """The targets of a run: those that lower here, those that cannot (and why), the fp32
    references added to measure reduced precisions against, --precision auto's groups."""

    targets: list[Target]
    unavailable: list[Unavailable] = field(default_factory=list)
    available_names: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)  # fp32 targets added to measure reduced ones against
    auto: list = field(default_factory=list)  # AutoGroup per backend under --precision auto
    auto_notes: list[str] = field(default_factory=list)


def plan_targets(
    requests: list[str] | None,
    registry: Registry | None = None,
    platform: str | None = None,
    precision: str | None = None,
    here=None,
) -> TargetPlan:
    """Turn ``--backends`` words into targets; sort out what cannot lower here.

    Unknown names and precisions a backend does not take are usage errors, raised
    before any work. ``None`` means every backend that can lower here. ``platform``
    (``--target ios``) adds that platform's backends in priority order: when they
    cannot lower here they are listed, but do not fail the run. ``precision`` (``--precision``) is the precision
    of targets that name none, or ``auto``. A reduced-precision target that runs here brings
    its fp32 reference, to be timed against (see :mod:`pteforge.app.precision`).
    """
    registry = registry or default_registry()
    implied: frozenset[str] = frozenset()
    if platform:
        implied = frozenset(targets_for(platform)) - set(requests or [])
        requests = [*targets_for(platform), *(requests or [])]
    plan = _plan(requests, registry, implied, None if precision in (None, "auto") else Precision.parse(precision))
    here = here or host()
    if precision == "auto":
        plan.targets, plan.auto, plan.auto_notes = expand_auto(plan.targets, here)
    plan.targets, plan.references = with_references(
        plan.targets, lambda t: all(registry.get(b).run_check(here).ok for b in t.backends))
    return plan


def own_targets(models: list, requests, target: str | None, precision: str | None) -> tuple[list, list | None]:
    """Where a config file's [[model]] table gives a model its own backends or precision: the
    run's requests become those of every model together, and each model keeps the names of
    its own targets (``ModelSpec.targets``), the others the run's."""
    if not any(m.targets for m in models):
        return models, requests

    def asked(plan) -> tuple[str, ...]:
        return tuple(t.name for t in plan.targets if t.name not in plan.references)

    run = plan_targets(requests, platform=target, precision=precision)
    every, named = list(asked(run)), []
    for m in models:
        if not m.targets:
            named.append(dataclasses.replace(m, targets=asked(run)))
            continue
        own = [r.replace("*", b.split(":")[0], 1) for r in m.targets for b in (asked(run) if r.startswith("*:") else [r])]
        mine = asked(plan_targets(own, precision=precision))
        every += [t for t in mine if t not in every]
        named.append(dataclasses.replace(m, targets=mine))
    return named, every


def _plan(requests, registry: Registry, implied: frozenset[str], default) -> TargetPlan:
    lowerable = [b.name for b in registry if b.lower_check().ok]
    if requests is None:
        targets = []
        for name in lowerable:
            b = registry.get(name)
            p = default if default in b.precisions else b.default_precision
            targets.append(Target((name,), p, default_precision=p is b.default_precision))
        return TargetPlan(targets, [], lowerable)
    plan = TargetPlan([], [], lowerable)
    seen: set[str] = set()
    for text in requests:
        req = TargetRequest.parse(text)
        chain = tuple(registry.resolve(name) for name in req.backends)
        if len(set(chain)) != len(chain):
            raise UsageError(f"target '{text}' names a backend twice", fix="name each backend once in a chain")
        primary = registry.get(chain[0])
        precision = req.precision or default or primary.default_precision
        if precision not in primary.precisions and precision not in primary.llm_precisions:
            raise UsageError(
                f"{primary.name} does not take precision {precision.value}; it takes: "
                f"{', '.join(p.value for p in primary.precisions)}",
                fix=f"use e.g. --backends {primary.name}:{primary.default_precision.value}",
            )
        target = Target(chain, precision, default_precision=precision == primary.default_precision)
        if target.name in seen:
            continue
        seen.add(target.name)
        blocked = next(((b, c) for b in chain if not (c := registry.get(b).lower_check()).ok), None)
        if blocked:
            plan.unavailable.append(Unavailable(target.name, blocked[1], requested=text not in implied))
        else:
            plan.targets.append(target)
    if not plan.targets:
        err = NoBackendError(
            f"No available backends from requested: {[u.target for u in plan.unavailable]}",
            fix=f"Available backends: {lowerable}",
        )
        err.plan = plan
        raise err
    return plan


def planned_jobs(models: list[ModelSpec], plan: TargetPlan | None, config: ExportConfig) -> list[tuple]:
    """The run's jobs as ``export`` makes them: (model, its targets, how many of them the
    artifact cache holds), each model with the targets it takes (a [[model]] table's own, an
    fp32 reference only where a target it takes needs one)."""
    if plan is None:
        return []
    jobs = []
    for spec in models:
        targets, held = targets_of(spec, plan), 0
        for t in targets if config.cache else ():
            with contextlib.suppress(OSError):  # an unreadable weights file: the capture will say so
                held += cache.holds(cache.key_for(spec, t, config, versions(set(t.backends))))
        jobs.append((spec, targets, held))
    return jobs


def targets_of(spec: ModelSpec, plan: TargetPlan) -> list[Target]:
    """The run's targets for ``spec``: an fp32 reference only where a target that needs it
    is one the model's family takes (a language model asked for xnnpack:int8, which it is
    not exported at, got an unasked xnnpack program)."""
    fam, references = family(spec.family), set(plan.references)
    asked = [t for t in plan.targets if t.name not in references and (spec.targets is None or t.name in spec.targets)]
    needed = {ref.name for t in asked if fam.supports(t) for ref in [fp32_reference(t)] if ref is not None}
    return [t for t in plan.targets if t in asked or t.name in needed]
