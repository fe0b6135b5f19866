"""``validate``: run every artifact under a directory on real images, in a child process,
and compare with the eager model on the same images.

Facts come from the manifests (``index.json``, found recursively), never from file
names; a ``.pte`` without a manifest entry is validated from what the file itself
says (its delegates and input shapes): it is run, but has no eager reference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..backends import program_check
from ..backends.toolkit.simulate import simulate_request
from ..core.errors import UsageError, one_line
from ..core.io import differs
from ..core.result import Status, budget_missed, verdict
from ..core.spec import (
    WEIGHTS_PRETRAINED,
    AccuracyBudget,
    InputSpec,
    ModelSpec,
    Precision,
    Preprocessing,
    input_highs,
)
from ..core.units import EXACT_DB
from ..families import family
from ..families.text import build, llm_spec
from ..models.catalog import build_catalog
from ..models.onnx.reference import reference_model
from ..models.synthetic import integer_high, make_inputs
from ..report.manifest import MANIFEST_NAME, ModelEntry, load_manifest
from ..runtime.host import Host
from ..runtime.isolate import ChildCrashed, IsolatedRuntime
from ..stages.capture import build_model, flatten_outputs
from ..stages.verify import compare, degenerate, integer_agreement, threshold_for


@dataclass
class ImageResult:
    image: str
    status: str  # ok
    inference_ms: float | None = None
    results: list[dict] | None = None  # decoded as the app would: top-5, boxes, keypoints, masks
    eager_results: int | None = None  # how many eager decoded on the same photo
    agreement: float | None = None  # the family's metric against eager, in [0, 1]
    drawn: str | None = None  # --draw: the annotated photo, relative to the models dir


@dataclass
class FileResult:
    file: str
    status: Status
    model: str | None = None
    target: str | None = None
    reason: str | None = None
    delegates: list[str] = field(default_factory=list)
    load_ms: float | None = None
    method: str | None = None  # SIMULATED: what ran it (backends/toolkit/simulate.py)
    simulator: str | None = None  # SIMULATED: the reference simulator, in a few words
    agreement: float | None = None  # on the photos, the family's metric
    sqnr_db: float | None = None  # on the photos (or validate's own seeded inputs for a file with no entry)
    seeded_sqnr_db: float | None = None  # on the export's own seeded inputs, run again
    budget_missed: str | None = None  # what of the export's accuracy budget it misses
    images: list[ImageResult] = field(default_factory=list)


def discover(models_dir: Path) -> list[tuple[Path, ModelEntry | None, Path | None]]:
    """Every artifact under ``models_dir``: (file, its manifest entry or None, manifest dir)."""
    models_dir = Path(models_dir)
    found: dict[Path, tuple[Path, ModelEntry | None, Path | None]] = {}
    for manifest_path in sorted(models_dir.rglob(MANIFEST_NAME)):
        manifest = load_manifest(manifest_path)
        for entry in manifest.artifacts() if manifest else []:
            f = (manifest_path.parent / entry.file).resolve()
            if f.exists():
                found[f] = (f, entry, manifest_path.parent)
            if entry.bundle:
                b = (manifest_path.parent / entry.bundle["file"]).resolve()
                if b.exists():
                    found[b] = (b, entry, manifest_path.parent)
    for f in sorted([*models_dir.rglob("*.pte"), *models_dir.rglob("*.bpte")]):
        found.setdefault(f.resolve(), (f.resolve(), None, None))
    return sorted(found.values(), key=lambda t: str(t[0]))


@dataclass
class ReportPlace:
    """Where ``validate`` writes: its JSON report and the drawings (``--draw``); ``site``: the
    published site the directory lies in, which validate only reads (nothing goes into it:
    the report goes to the cache's ``validation/`` folder, or where --output-file says)."""

    output: Path
    draw: Path | None
    site: Path | None = None


def report_place(root: Path, output_file: str | None, draw: str | None) -> ReportPlace:
    """Where the validation of ``root`` writes, refused (before any work) inside a published site."""
    from ..report.summary import VALIDATION_NAME
    from .publish import published_site

    site = published_site(root)
    if site is None:
        return ReportPlace(Path(output_file) if output_file else Path(root) / VALIDATION_NAME,
                           None if draw is None else Path(draw or Path(root) / "validation"))

    from ..core.io import cache_root

    real = os.path.realpath(root)
    folder = cache_root() / "validation" / f"{Path(real).name}-{hashlib.sha256(os.fsencode(real)).hexdigest()[:8]}"
    place = ReportPlace(Path(output_file) if output_file else folder / VALIDATION_NAME,
                        None if draw is None else Path(draw or folder / "validation"), site)
    for flag, path, alone in (("--output-file", place.output, f"leave it out: the report then goes to {folder}"),
                              ("--draw", place.draw, f"give --draw alone: the drawings then go to {folder}")):
        if path is not None and Path(os.path.realpath(path)).is_relative_to(site):
            raise UsageError(f"{flag} {path} is inside {site}, a published site: validate only reads a site and writes "
                             "nothing into it", fix=f"give {flag} a path outside {site}, or {alone}")
    return place


class EagerCache:
    """Rebuilds each eager reference once (same weights and seed as the export)."""

    def __init__(self):
        self._models: dict[tuple, tuple] = {}

    def get(self, entry: ModelEntry):
        """The eager model, as the export built it."""
        return self.get_with_spec(entry)[0]

    def get_with_spec(self, entry: ModelEntry) -> tuple:
        """(the eager model, the spec it was built from), as the export built them."""
        key = (entry.base_model, entry.source, entry.weights, entry.seed, getattr(entry, "task", None),
               getattr(entry, "category", None), str(getattr(entry, "preprocessing", None)), str(entry.inputShapes))
        if key not in self._models:
            self._models[key] = self._build(entry)
        return self._models[key]

    @staticmethod
    def _build(entry: ModelEntry):
        if entry.source in (None, "catalog"):
            spec = build_catalog().get(entry.base_model)
            shape = tuple(entry.inputShapes[0]) if entry.inputShapes else spec.inputs[0].shape
            if shape != spec.inputs[0].shape:  # exported at another size (--input-shape)
                from ..families import family

                spec = family(spec.family).resized(spec, shape)
        else:
            held = tuple(InputSpec((), "float32", name, value) for name, value in (entry.heldInputs or {}).items())
            given = [i for i in entry.inputs or [] if i.get("dtype")]
            shapes = tuple(InputSpec(tuple(s), given[i]["dtype"] if i < len(given) else "float32",
                                     high=given[i].get("high") if i < len(given) else None)
                           for i, s in enumerate(entry.inputShapes))
            spec = _own_spec(entry, shapes, held)
            if spec.source == "onnx":
                return reference_model(spec, None), spec
            spec = _as_exported(spec, entry)
        return build_model(spec, entry.weights or "pretrained", entry.seed or 0), spec


def _own_spec(entry: ModelEntry, shapes: tuple, held: tuple):
    """The spec of a model file as the export made it. A TorchScript program's inputs are
    named by its ``forward``'s arguments, which the export bound them to (``--input-shape
    attention_mask=...``): given by those names again, where ``forward`` has them."""
    from ..models.own import custom_spec, file_kind

    source = entry.source
    assert source is not None  # _build: the entry of a model file, which names it
    names = [i.get("name") for i in entry.inputs or []]
    if len(names) == len(shapes) and all(names) and file_kind(source) == "torchscript":
        try:
            return custom_spec(source, tuple(dataclasses.replace(s, name=n) for s, n in zip(shapes, names)) + held)
        except UsageError:  # not forward's names (a program exported before they were kept)
            pass
    return custom_spec(source, shapes + held)


def _as_exported(spec, entry: ModelEntry):
    """A model of one's own as the export saw it: its name, and the task, category and
    preprocessing ``--task`` gave it, which decide the seeded inputs its random weights'
    BatchNorm statistics are estimated on (``models.factory._normalise``): rebuilt without
    them, the eager reference is another model."""
    pre = None
    if entry.preprocessing:
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.preprocessing.items()
                  if k in Preprocessing.__dataclass_fields__}
        pre = Preprocessing(**fields)
    return dataclasses.replace(spec, name=entry.base_model, family=entry.category, task=entry.task,
                               preprocessing=pre or spec.preprocessing)


def _labels(entry: ModelEntry, manifest_dir: Path | None) -> list[str] | None:
    if entry.labelsFile and manifest_dir and (manifest_dir / entry.labelsFile).exists():
        from ..core.limits import read_text_file

        return read_text_file(manifest_dir / entry.labelsFile, "the manifest's labelsFile").splitlines()
    return None


def validate(models_dir: Path, images: list[Path], on_file=None, timeout: float = 300.0, draw: Path | None = None) -> list[FileResult]:
    """Run every artifact under ``models_dir`` on ``images``; ``draw``: write each photo,
    annotated with what the program found, under that directory."""
    results: list[FileResult] = []
    eager = EagerCache()
    with IsolatedRuntime(timeout=timeout) as child, tempfile.TemporaryDirectory(prefix="pteforge-validate-") as tmp:
        here = None
        for path, entry, manifest_dir in discover(models_dir):
            if here is None:
                try:
                    here = Host.from_dict(child.request("host"))
                except ChildCrashed as exc:
                    raise RuntimeError(f"the validation child process cannot start: {exc}") from None
            rel = str(path.relative_to(Path(models_dir).resolve())) if path.is_relative_to(Path(models_dir).resolve()) else str(path)
            res = FileResult(file=rel, status=Status.LOAD_FAILED,
                             model=entry.base_model if entry else None, target=entry.target if entry else None)
            changed = differs(path, entry.size, entry.hash) if entry is not None and path.suffix != ".bpte" else None
            try:
                if path.suffix == ".bpte":
                    _validate_bundle(child, path, entry, here, res)
                elif entry is not None and entry.task == "text-generation":
                    _validate_language_model(child, path, entry, here, Path(tmp), res)
                else:
                    _validate_pte(child, path, entry, manifest_dir, here, images, eager, Path(tmp), res,
                                  draw=(Path(draw), Path(models_dir)) if draw is not None else None)
            except ChildCrashed as exc:
                res.status = Status.RUN_FAILED if res.delegates else Status.LOAD_FAILED
                res.reason = f"the child process {exc} while running this file"
            if changed:
                _not_as_listed(res, changed)
            results.append(res)
            if on_file:
                on_file(res)
    return results


def _not_as_listed(res: FileResult, why: str) -> None:
    """A file that is not the one its manifest entry lists (``why``: core.io.differs) is never
    proven, however it ran: what ran is said beside it, and a run that went well is a MISMATCH."""
    said = f"the file {why}: not the program its export proved (export it again, or restore the file)"
    if Status(res.status).ok:
        res.status, res.reason = Status.MISMATCH, said + (f"; as it is: {res.reason}" if res.reason else "")
    else:
        res.reason = f"{res.reason}; {said}" if res.reason else said


def _validate_bundle(child, path, entry, here, res) -> None:
    delegates = entry.delegation.get("delegates_in_program", []) if entry else []
    res.delegates = delegates
    check = program_check(here, delegates, entry.delegation.get("kernels", []) if entry else [])
    if not check.ok:
        res.status, res.reason = check.not_here, check.reason
        return
    testsets = entry.bundle["testsets"] if entry and entry.bundle else 1
    # Tolerance from the export-time proof: 10x the worst error measured then.
    measured = (entry.verification or {}).get("max_abs_error") if entry else None
    atol = max(1e-4, 10 * measured) if measured is not None else 1e-2
    reply = child.request("run_bundled", path=str(path), testsets=testsets, rtol=1e-3, atol=atol)
    if reply["ok"]:
        res.status, res.reason = Status.VERIFIED, f"{testsets} bundled test case(s) matched their expected outputs"
    else:
        res.status, res.reason = Status.MISMATCH if "mismatch" in reply["error"].lower() else Status.RUN_FAILED, reply["error"]


def inspect_runnable(child, path, here, res, simulated: bool = False) -> dict | None:
    """The program's facts from the child, or None (with ``res`` saying why) when it cannot
    be read or does not run on this host; with ``simulated``, a program this host cannot run
    comes back too, ``res`` NOT_RUNNABLE_HERE, for a reference simulator to try."""
    info = child.request("inspect", path=str(path))
    if not info["ok"]:
        res.reason = info["error"]
        return None
    res.delegates = info["delegates"]
    check = program_check(here, info["delegates"], info["operators"])
    if not check.ok:
        res.status, res.reason = check.not_here, check.reason
        return info if simulated and check.anywhere else None
    return info


def _chain(entry, info) -> list[str]:
    """The backends that made a program: its manifest entry's, or those whose delegates and
    kernels it calls."""
    from ..backends import default_registry

    if entry is not None and entry.backends:
        return list(entry.backends)
    namespaces = {op.split("::")[0] for op in info["operators"]}
    return [b.name for b in default_registry() if b.runtime_name in info["delegates"] or b.ops_namespace in namespaces]


def _outputs(child, path, info, entry, batches, tmp, res) -> tuple[list, list] | None:
    """The program's outputs on ``batches`` and their times (ms; None where simulated): from
    this host's runtime, or from the reference simulator of a program it cannot run. None
    (``res`` saying why) when neither ran it."""
    import torch

    inputs_file, outputs_file = tmp / f"{path.stem}.in.pt", tmp / f"{path.stem}.out.pt"
    torch.save(batches, inputs_file)
    if res.status is Status.NOT_RUNNABLE_HERE:
        reply = child.call(simulate_request, path=str(path), inputs=str(inputs_file), outputs=str(outputs_file),
                              backends=_chain(entry, info))
        if reply["ok"] and not reply["simulated"]:
            on = (entry.verification or {}).get("simulator") if entry is not None else None
            if on or entry is not None and entry.status == Status.SIMULATED.value:
                res.reason += (f"; simulated at export ({entry.status}) on {on or 'a reference simulator'}, from what only "
                               "an export on this machine keeps (Vela's TOSA graph)")
            return None  # needs a device, as res says
        res.method, res.simulator = reply.get("method"), reply.get("simulator")
    else:
        reply = child.request("run", path=str(path), inputs=str(inputs_file), outputs=str(outputs_file))
    if not reply["ok"]:
        res.status, res.reason = Status.RUN_FAILED, reply["error"]
        return None
    if "load_ms" in reply:
        res.load_ms = round(reply["load_ms"], 2)
    return torch.load(outputs_file, weights_only=True), reply.get("times_ms") or [None] * len(batches)


def _validate_pte(child, path, entry, manifest_dir, here, images, eager, tmp, res, draw=None) -> None:
    """Run one program on the photos (an image model) and on the export's own seeded
    inputs, beside the eager model rebuilt as the export built it; its status from the same
    evidence and the same function as the export's (``core.result.verdict``)."""
    info = inspect_runnable(child, path, here, res, simulated=True)
    if info is None:
        return
    fam = family(entry.category if entry else None)
    spec = _photo_spec(entry)
    prepared = [fam.prepare(img, spec) for img in images] if spec else []
    photo_batches = [[p.tensor] for p in prepared]
    built = _eager(entry, eager, res) if entry is not None else None
    seeded = _export_inputs(entry, built[1]) if built else None
    highs = input_highs(entry.inputs if entry else None)
    batches = photo_batches + (seeded or ([] if spec else [seeded_inputs(info["inputs"], s, highs) for s in range(3)]))
    ran = _outputs(child, path, info, entry, batches, tmp, res)
    if ran is None:
        return
    outputs, times_ms = ran
    reference = _reference(built[0], batches, res) if built else None
    names = _labels(entry, manifest_dir) if entry else None
    photos = images if spec else None
    n = len(photo_batches)
    agreements, sqnrs, boxes = _per_input(fam, outputs[:n], reference[:n] if reference else None, prepared, names,
                                          photos, times_ms[:n], res, draw)
    if reference is None:
        res.status = Status.NOT_VERIFIED
        res.reason = res.reason or "no manifest entry: ran on this host; no eager reference to compare with"
        return

    broken = degenerate(reference, outputs, [img.image for img in res.images] + [
        f"seeded input {i}" for i in range(len(outputs) - n)])
    if broken:  # no SQNR judges it: the model's NaN, or the program's NaN or constant output
        res.status, res.reason = Status.MISMATCH, broken[1]
        return
    whose = "the export's" if seeded is not None else "validate's own" if not spec else None
    _judge(res, entry, _evidence(entry, outputs[n:], reference[n:], whose), agreements, sqnrs, boxes)


def _eager(entry, eager, res):
    """(the eager model, its spec) rebuilt from the entry, or None with ``res`` saying why."""
    try:
        return eager.get_with_spec(entry)
    except Exception as exc:  # e.g. pretrained weights offline
        res.reason = f"no eager reference ({one_line(exc, 160)})"
        return None


def _export_inputs(entry, spec) -> list | None:
    """The seeded inputs the export verified on (``stages.capture``: seeds ``seed`` to
    ``seed + n - 1`` of the spec the export built), or None where they were the user's own
    files (``--calibration DIR``), which validate does not have."""
    v = entry.verification or {}
    if not v.get("inputs") or v.get("inputs_from"):
        return None
    return [list(make_inputs(spec, (entry.seed or 0) + i)) for i in range(int(v["inputs"]))]


def _evidence(entry, outputs, reference, whose: str | None) -> dict:
    """What the export's own test says on its own inputs, run again: SQNR (worst) and, for a
    classifier, top-1 agreement, against the threshold the export recorded."""
    v = entry.verification or {}
    threshold = v.get("threshold_sqnr_db") or threshold_for(v.get("runtime_precision") or entry.precision, None)
    if whose is None or not outputs:
        return {"threshold": threshold}
    worst = min(compare(e, a)["sqnr"] for e, a in zip(reference, outputs))
    top1 = None
    if entry.task == "classification":
        top1 = sum(int(e[0].flatten().argmax()) == int(a[0].flatten().argmax())
                   for e, a in zip(reference, outputs)) / len(outputs)
    return {"threshold": threshold, "sqnr": _finite_db(worst), "top1": top1, "inputs": len(outputs), "whose": whose,
            "integer_agreement": integer_agreement(reference, outputs)}


def _finite_db(value: float) -> float | None:
    """An SQNR to print: capped at 200 dB (identical), None where undefined (NaN)."""
    return round(min(value, EXACT_DB), 2) if not math.isnan(value) else None


def _photo_spec(entry):
    """The entry's model spec when its input is a photo through a known preprocessing."""
    if entry is None or not entry.preprocessing or len(entry.inputShapes or []) != 1 or len(entry.inputShapes[0]) != 4:
        return None
    pre: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.preprocessing.items()}
    if "letterbox" in pre:  # manifests before the fit field
        pre["fit"] = "letterbox" if pre.pop("letterbox") else "crop"
    pre = {k: v for k, v in pre.items() if k in Preprocessing.__dataclass_fields__}
    return ModelSpec(name=entry.base_model, family=entry.category, task=entry.task,
                     inputs=(InputSpec(tuple(entry.inputShapes[0])),), factory="", preprocessing=Preprocessing(**pre))


def _reference(model, batches, res) -> list | None:
    import torch


    try:
        with torch.no_grad():
            return [flatten_outputs(model(*b)) for b in batches]
    except Exception as exc:  # noqa: BLE001 - the file is still run, with nothing to compare to
        res.reason = f"no eager reference ({one_line(exc, 160)})"
        return None


def _per_input(fam, outputs, reference, prepared, names, photos, times_ms, res, draw) -> tuple[list, list, list]:
    """Decode each output on a photo as an app would, compare with eager; (agreements,
    SQNRs, boxes matched) on the photos."""
    agreements, sqnrs, boxes = [], [], []
    for i, out in enumerate(outputs):
        img = ImageResult(image=photos[i].name if photos else f"seeded input {i}", status="ok",
                          inference_ms=round(times_ms[i], 3) if times_ms[i] is not None else None)
        res.images.append(img)
        if photos:
            decoded = fam.decode(out, prepared[i].meta, names)
            img.results = [{k: v for k, v in d.items() if not k.startswith("_")} for d in decoded]
            if draw is not None:
                dest = Path(draw[0]) / Path(res.file).with_suffix("").as_posix().replace("/", "__") / f"{photos[i].stem}.jpg"
                fam.draw(photos[i], decoded, dest)
                img.drawn = os.path.relpath(dest, draw[1])
        if reference is None:
            continue
        ref = reference[i]
        sqnrs.append(compare(ref, out)["sqnr"])
        if photos:
            img.eager_results = len(fam.decode(ref, prepared[i].meta, names))
            img.agreement = fam.agreement(ref, out, prepared[i].meta)
            if img.agreement is not None:
                agreements.append(img.agreement)
            if hasattr(fam, "boxes_matched"):
                boxes.append(fam.boxes_matched(ref, out, prepared[i].meta))
    return agreements, sqnrs, boxes


def _judge(res, entry, seeded: dict, agreements: list, sqnrs: list, boxes: list) -> None:
    """The file's one status, by the export's function (``core.result.verdict``) on the same
    kinds of evidence: matched = the export's seeded inputs within the threshold it recorded
    (the photos' SQNR where those inputs were the user's own files); the accuracy budget the
    export recorded, judged on the photos (on the seeded inputs for a model of no photo)."""
    v = entry.verification or {}
    res.agreement = sum(agreements) / len(agreements) if agreements else None
    res.seeded_sqnr_db = seeded.get("sqnr") if seeded.get("whose") == "the export's" else None
    res.sqnr_db = _finite_db(min(sqnrs)) if sqnrs else seeded.get("sqnr")  # no photo: the seeded inputs'
    threshold = seeded["threshold"]
    judged = seeded["sqnr"] if "sqnr" in seeded else res.sqnr_db
    matched = judged is not None and judged >= threshold
    photos = {"sqnr_db": res.sqnr_db, "boxes_matched": sum(boxes) / len(boxes) if boxes else None}
    if entry.task == "classification" and agreements:
        photos["top1_agreement"] = res.agreement
    measured = {"images": photos if sqnrs else None, "sqnr_db": seeded.get("sqnr"), "top1_agreement": seeded.get("top1"),
                "integer_agreement": seeded.get("integer_agreement")}
    budget = AccuracyBudget(**v["budget"]) if v.get("budget") else AccuracyBudget.for_task(entry.task)
    res.budget_missed = budget_missed(entry.task, measured, budget) if matched else None
    res.status = verdict("simulator" if res.method else "host", matched, res.budget_missed)
    if res.status is Status.MISMATCH:
        where = f"on {seeded['whose']} {seeded['inputs']} seeded inputs" if "sqnr" in seeded else "on real images"
        sqnr = f"SQNR {judged:.1f} dB" if judged is not None else "eager's output all zeros where the program's is not"
        res.reason = f"differs from eager {where}: {sqnr} (needs {threshold:.0f})"
    elif res.status is Status.OUT_OF_BUDGET:
        res.reason = f"misses its accuracy budget ({res.budget_missed}; budget: {budget.describe(bool(sqnrs))})"
    else:
        res.reason = "; ".join(r for r in (f"on {res.simulator}" if res.method else None, None if sqnrs else
                               "no photo was run: its input is not an image") if r) or None


def seeded_inputs(specs: list[dict], seed: int, highs: list | tuple = ()) -> list:
    """Seeded inputs for a program's inputs (``{"shape", "dtype"}`` each); ``highs``: what
    its ids are drawn below, per input, where its export recorded one (``input_highs``)."""
    import torch


    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, spec in enumerate(specs):
        dtype = getattr(torch, spec["dtype"], torch.float32)
        if dtype.is_floating_point:
            out.append(torch.rand(*spec["shape"], generator=gen).to(dtype))
        else:
            high = (highs[i] if i < len(highs) else None) or integer_high(dtype)
            out.append(torch.randint(0, high, spec["shape"], generator=gen).to(dtype))
    return out


def write_report(path: Path, results: list[FileResult], images: list[Path], models_dir: Path) -> None:
    from ..core.io import json_text, write_atomic
    from ..report.manifest import now

    report = {
        "generated": now(),
        "models_dir": str(models_dir),
        "images": [str(p) for p in images],
        "summary": {s: sum(1 for r in results if r.status == s) for s in sorted({r.status for r in results})},
        "files": [asdict(r) for r in results],
    }
    write_atomic(path, json_text(report, indent=2) + "\n")


def _validate_language_model(child, path: Path, entry, here, tmp: Path, res) -> None:
    """``pteforge validate`` of a language model's entry: the same proof, against the eager
    model rebuilt from the entry (source, weights, seed, maxSeqLen)."""
    import torch

    from ..backends import default_registry
    from ..text.llm import generate, judge, proof_reference, tokenizer_of

    if inspect_runnable(child, path, here, res) is None:
        return
    spec = llm_spec(entry.base_model if entry.source in (None, "catalog") else entry.source,
                    getattr(entry, "maxSeqLen", None))
    model = build(spec, entry.weights or WEIGHTS_PRETRAINED, entry.seed or 0)
    reference = tmp / f"{path.stem}.reference.pt"
    torch.save(proof_reference(model, spec, entry.seed or 0, tokenizer_of(spec)), reference)
    reply = child.call(generate, path=str(path), reference=str(reference),
                          dynamic=default_registry().get(entry.backends[0]).llm_dynamic_shapes)
    if not reply["ok"]:
        res.status, res.reason = Status.RUN_FAILED, reply["error"]
        return
    res.load_ms, res.sqnr_db, res.agreement = round(reply["loadMs"], 2), reply["minSqnrDb"], reply["tokenAgreement"]
    res.reason = judge(reply, Precision(entry.precision), None)
    res.status = Status.MISMATCH if res.reason else Status.VERIFIED
