"""``validate``: run every artifact under a directory on real images, in a child process,
and compare with the eager model on the same images.

Facts come from the manifests (``index.json``, found recursively), never from file
names; a ``.pte`` without a manifest entry is validated from what the file itself
says (its delegates and input shapes): it is run, but has no eager reference.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import one_line
from .isolate import ChildCrashed, IsolatedRuntime
from .report.manifest import MANIFEST_NAME, ModelEntry, load_manifest
from .result import Status

FP_PRECISIONS = {"fp32", "fp16", "bf16"}


@dataclass
class ImageResult:
    image: str
    status: str
    inference_ms: float | None = None
    top5: list[dict] | None = None
    detections: list[dict] | None = None
    eager_top1: int | None = None
    eager_detections: int | None = None
    agreement: float | None = None  # top-1 equal (0/1) or matched fraction of eager boxes
    agreement_after_nms: float | None = None  # detection: against the program's final boxes


@dataclass
class FileResult:
    file: str
    status: str
    model: str | None = None
    target: str | None = None
    reason: str | None = None
    delegates: list[str] = field(default_factory=list)
    load_ms: float | None = None
    agreement: float | None = None
    sqnr_db: float | None = None
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


class EagerCache:
    """Rebuilds each eager reference once (same weights and seed as the export)."""

    def __init__(self):
        self._models: dict[tuple, object] = {}

    def get(self, entry: ModelEntry):
        key = (entry.base_model, entry.source, entry.weights, entry.seed)
        if key not in self._models:
            self._models[key] = self._build(entry)
        return self._models[key]

    @staticmethod
    def _build(entry: ModelEntry):
        from .models.catalog import build_catalog
        from .models.custom import factory_spec, pt2_spec
        from .spec import InputSpec
        from .stages.capture import build_model

        if entry.source in (None, "catalog"):
            spec = build_catalog().get(entry.base_model)
        elif entry.source.endswith(".pt2"):
            spec = pt2_spec(entry.source)
        else:
            spec = factory_spec(entry.source, tuple(InputSpec(tuple(s)) for s in entry.inputShapes), entry.base_model)
        return build_model(spec, entry.weights or "pretrained", entry.seed or 0)


def _labels(entry: ModelEntry, manifest_dir: Path | None) -> list[str] | None:
    if entry.labelsFile and manifest_dir and (manifest_dir / entry.labelsFile).exists():
        return (manifest_dir / entry.labelsFile).read_text().splitlines()
    return None


def validate(models_dir: Path, images: list[Path], on_file=None, timeout: float = 300.0) -> list[FileResult]:
    results: list[FileResult] = []
    eager = EagerCache()
    with IsolatedRuntime(timeout=timeout) as child, tempfile.TemporaryDirectory(prefix="pteforge-validate-") as tmp:
        registered: set[str] | None = None
        for path, entry, manifest_dir in discover(models_dir):
            if registered is None:
                try:
                    registered = set(child.request("registered")["backends"])
                except ChildCrashed as exc:
                    raise RuntimeError(f"the validation child process cannot start: {exc}") from None
            rel = str(path.relative_to(Path(models_dir).resolve())) if path.is_relative_to(Path(models_dir).resolve()) else str(path)
            res = FileResult(file=rel, status=Status.LOAD_FAILED.value,
                             model=entry.base_model if entry else None, target=entry.target if entry else None)
            try:
                if path.suffix == ".bpte":
                    _validate_bundle(child, path, entry, registered, res)
                else:
                    _validate_pte(child, path, entry, manifest_dir, registered, images, eager, Path(tmp), res)
            except ChildCrashed as exc:
                res.status = Status.RUN_FAILED.value if res.delegates else Status.LOAD_FAILED.value
                res.reason = f"the child process {exc} while running this file"
            results.append(res)
            if on_file:
                on_file(res)
    return results


def _validate_bundle(child, path, entry, registered, res) -> None:
    delegates = entry.delegation.get("delegates_in_program", []) if entry else []
    res.delegates = delegates
    missing = [d for d in delegates if d not in registered]
    if missing:
        res.status, res.reason = Status.NOT_RUNNABLE_HERE.value, f"{missing[0]} is not registered in this runtime"
        return
    testsets = entry.bundle["testsets"] if entry and entry.bundle else 1
    # Tolerance from the export-time proof: 10x the worst error measured then.
    measured = (entry.verification or {}).get("max_abs_error") if entry else None
    atol = max(1e-4, 10 * measured) if measured is not None else 1e-2
    reply = child.request("run_bundled", path=str(path), testsets=testsets, rtol=1e-3, atol=atol)
    if reply["ok"]:
        res.status, res.reason = Status.VERIFIED.value, f"{testsets} bundled test case(s) matched their expected outputs"
    else:
        res.status, res.reason = Status.MISMATCH.value if "mismatch" in reply["error"].lower() else Status.RUN_FAILED.value, reply["error"]


def _validate_pte(child, path, entry, manifest_dir, registered, images, eager, tmp, res) -> None:
    import torch

    from .stages.verify import DEFAULT_MIN_SQNR_DB, compare
    from .vision import anchor_agreement, classification_input, decode_yolo, detection_input, matched_fraction, top_k

    info = child.request("inspect", path=str(path))
    if not info["ok"]:
        res.reason = info["error"]
        return
    res.delegates = info["delegates"]
    missing = [d for d in dict.fromkeys(info["delegates"]) if d not in registered]
    if missing:
        res.status, res.reason = Status.NOT_RUNNABLE_HERE.value, f"{missing[0]} is not registered in this runtime"
        return

    task = entry.task if entry else None
    names = _labels(entry, manifest_dir) if entry else None
    if task == "classification" and entry.preprocessing:
        batches = [[classification_input(img, entry.preprocessing)] for img in images]
        boxes_meta = None
    elif task == "detection" and entry.inputSize:
        prepared = [detection_input(img, entry.inputSize) for img in images]
        batches = [[x] for x, _ in prepared]
        boxes_meta = [lb for _, lb in prepared]
    else:  # a custom task, or no manifest entry: seeded inputs of the program's own shapes
        batches = [seeded_inputs(info["inputs"], seed) for seed in range(3)]
        boxes_meta = None
    inputs_file, outputs_file = tmp / f"{path.stem}.in.pt", tmp / f"{path.stem}.out.pt"
    torch.save(batches, inputs_file)
    reply = child.request("run", path=str(path), inputs=str(inputs_file), outputs=str(outputs_file))
    if not reply["ok"]:
        res.status, res.reason = Status.RUN_FAILED.value, reply["error"]
        return
    res.load_ms = round(reply["load_ms"], 2)
    outputs = torch.load(outputs_file, weights_only=True)

    reference = None
    if entry is not None:
        try:
            model = eager.get(entry)
            from .stages.capture import flatten_outputs

            with torch.no_grad():
                reference = [flatten_outputs(model(*b)) for b in batches]
        except Exception as exc:  # e.g. pretrained weights offline
            res.reason = f"no eager reference ({one_line(exc, 160)})"

    agreements, sqnrs = [], []
    img_dets: dict[int, list] = {}
    for i, out in enumerate(outputs):
        img = ImageResult(image=images[i].name if task in ("classification", "detection") else f"seeded input {i}",
                          status="ok", inference_ms=round(reply["times_ms"][i], 3))
        if task == "classification":
            img.top5 = top_k(out[0], 5, names)
        elif task == "detection":
            img_dets[i] = decode_yolo(out[0], boxes_meta[i])
            img.detections = [d.to_dict(names) for d in img_dets[i]]
        if reference is not None:
            ref = reference[i]
            sqnrs.append(compare(ref, out)["sqnr"])
            if task == "classification":
                img.eager_top1 = int(ref[0].flatten().argmax())
                img.agreement = float(img.eager_top1 == img.top5[0]["class"])
            elif task != "detection":
                continue  # custom task: the SQNR is the comparison
            else:
                eager_dets = decode_yolo(ref[0], boxes_meta[i])
                img.eager_detections = len(eager_dets)
                mine = img_dets[i]
                img.agreement_after_nms = matched_fraction(eager_dets, mine)
                # Per eager box, at its anchor in the program's output: NMS and argmax
                # flip on 1e-6 ties when weights are random (see anchor_agreement).
                img.agreement = anchor_agreement(eager_dets, out[0], boxes_meta[i])
            agreements.append(img.agreement)
        res.images.append(img)

    if reference is None:
        res.status = Status.NOT_VERIFIED.value
        res.reason = res.reason or "no manifest entry: ran on this host; no eager reference to compare with"
        return
    res.agreement = sum(agreements) / len(agreements) if agreements else None
    res.sqnr_db = round(min(min(sqnrs), 200.0), 2)
    effective = (entry.verification or {}).get("runtime_precision") or entry.precision
    threshold = DEFAULT_MIN_SQNR_DB.get(effective, 10.0)
    need = (1.0 if task == "classification" else 0.9) if effective in FP_PRECISIONS else 0.0
    if res.sqnr_db >= threshold and (res.agreement is None or res.agreement >= need):
        res.status = Status.VERIFIED.value
        res.reason = None if task in ("classification", "detection") else (
            f"matched eager on {len(outputs)} seeded inputs; no photo was run: its input is not an image"
        )
    else:
        res.status = Status.MISMATCH.value
        agreement = f", agreement {res.agreement:.0%}" if res.agreement is not None else ""
        where = "real images" if task in ("classification", "detection") else "seeded inputs"
        res.reason = f"differs from eager on {where}: SQNR {res.sqnr_db:.1f} dB (needs {threshold:.0f}){agreement}"


def seeded_inputs(specs: list[dict], seed: int) -> list:
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in specs:
        dtype = getattr(torch, spec["dtype"], torch.float32)
        if dtype.is_floating_point:
            out.append(torch.rand(*spec["shape"], generator=gen).to(dtype))
        else:
            out.append(torch.randint(0, 2 if dtype == torch.bool else 10, spec["shape"], generator=gen).to(dtype))
    return out


def write_report(path: Path, results: list[FileResult], images: list[Path], models_dir: Path) -> None:
    from .io import write_atomic
    from .report.manifest import now

    report = {
        "generated": now(),
        "models_dir": str(models_dir),
        "images": [str(p) for p in images],
        "summary": {s: sum(1 for r in results if r.status == s) for s in sorted({r.status for r in results})},
        "files": [asdict(r) for r in results],
    }
    write_atomic(path, json.dumps(report, indent=2) + "\n")
