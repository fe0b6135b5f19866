"""The checks an export run makes before any work (``--dry-run`` makes the same): its
options against its models, each factory importable, no two models of one name, the
output directory writable and the manifest already in it compatible."""

from __future__ import annotations

from pathlib import Path

from ..core import samples
from ..core.errors import OutputError, UsageError
from ..core.io import check_output_dir, work_dir
from ..core.request import first_duplicate
from ..core.spec import ExportConfig, ModelSpec
from ..families import family
from ..families.vision import image_dir, takes_images
from ..models.factory import check_factory
from ..report.manifest import MANIFEST_NAME, load_manifest
from .plan import TargetPlan


def prepare_out_dir(models: list[ModelSpec], config: ExportConfig, plan: TargetPlan) -> Path:
    """The output directory, made, once everything ``check_before_work`` checks holds."""
    out = check_before_work(models, config, plan, create=True)
    work_dir()
    return out


def check_before_work(models: list[ModelSpec], config: ExportConfig, plan: TargetPlan | None,
                      create: bool = False) -> Path:
    """Every check a run makes before any work, the same for ``--dry-run`` (which creates
    nothing): the run's options, each factory importable and callable, the output directory
    writable and the manifest already in it (a broken one is refused) compatible."""
    check_run(models, config, plan)
    for m in models:
        if m.source == "factory":
            check_factory(m.factory)
    out = Path(config.out_dir)
    _refuse_a_site(out)
    check_output_dir(out, create=create)
    existing = load_manifest(out / MANIFEST_NAME) if out.is_dir() else None
    if existing is not None:
        _check_against(existing, models, out)
    return out


def _refuse_a_site(out: Path) -> None:
    """``--out`` inside a published site (a folder holding publish's versions.json, or one
    below it) is refused: only publish writes a served site, swapping a version whole; an
    export would rewrite a served index in place and serve its reports and logs."""
    from ..app.publish import published_site

    site = published_site(out)
    if site is not None:
        raise OutputError(f"--out {out} is inside the published site {site}, which only pteforge publish writes",
                          fix=f"export into a folder of its own (e.g. --out models), then: pteforge publish models "
                              f"--site {site}")


def check_run(models: list[ModelSpec], config: ExportConfig, plan: TargetPlan | None = None) -> None:
    """What the command line refuses, refused here too, before any work."""
    if plan is not None and plan.auto and config.bench_runs == 0:
        raise UsageError("--precision auto picks the fastest precision, and --bench-runs 0 times none",
                         fix="drop --bench-runs 0, or give one precision")

    if config.calibration_dir is not None:
        _check_calibration(models, config)
    _check_names(models)
    for m in models:
        family(m.family).check(m, config)


def _check_calibration(models: list[ModelSpec], config: ExportConfig) -> None:
    """``--calibration DIR``: input files every model takes (each file read and checked
    against each model's inputs, where they are known), or photos for image models only."""
    if samples.holds_samples(config.calibration_dir):
        files = [p for part in samples.split(config) for p in part]
        for m in models:
            for p in files if m.fed else ():
                samples.load(p, m)
        return
    image_dir(config.calibration_dir, "--calibration", config.calibration_samples)
    others = [m.name for m in models if not takes_images(m)]
    if others:
        raise UsageError(
            f"--calibration DIR of photos applies to image models; {', '.join(others)} take(s) no image input",
            fix="give these models a directory of their own input files (.npy or .npz, one sample a file), "
                "or export them in a separate run",
        )


def _check_names(models: list[ModelSpec]) -> None:
    """Two models of one name would write the same files and manifest entries."""
    pair = first_duplicate(models, lambda m: m.name)
    if pair is not None:
        other, m = models[pair[0]], models[pair[1]]
        raise UsageError(
            f"two models are named {m.name}: {_origin(other)} and {_origin(m)}; one would overwrite the other",
            fix="rename one factory, or export them in separate runs to different --out directories",
        )


def _check_against(manifest, models: list[ModelSpec], out: Path) -> None:
    """A model whose name an earlier run in ``out`` gave to another model is refused."""
    for m in models:
        for e in manifest.artifacts():
            if (e.model or e.modelName) == m.name and e.source is not None and e.source != m.source_ref:
                raise UsageError(
                    f"{out} already holds a model named {m.name} from {e.source}; {_origin(m)} would overwrite it",
                    fix="rename the factory, or export to another --out",
                )


def _origin(spec: ModelSpec) -> str:
    return {"catalog": f"catalog model {spec.name}", "factory": spec.factory}.get(spec.source, str(spec.path))
