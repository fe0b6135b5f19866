"""Content-addressed artifact cache.

An artifact is fully determined by: the model (catalog name, factory source or .pt2
file, and its weights: seed for random init, file hash for a state dict, library
versions for pretrained), its input spec and preprocessing, the target and
precision, the options that change the program or its proof, and the code that made
it (pteforge's own source, torch, executorch and each backend SDK's version). The
sha256 of those facts is the key; the cached program, its BundledProgram and its
record live under ``<user cache dir>/pteforge/artifacts/<key>/``.

Computing a key imports neither torch nor ExecuTorch, so an unchanged re-export
starts no worker and finishes in well under a second. Only rows that succeeded are
stored (a failure is retried next time). ``--no-cache`` skips the lookup;
``pteforge cache clear`` empties the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from ..core.io import CACHE_ENV, cache_root, link_or_copy, path_lock, unwritable  # noqa: F401 - the cache's own places
from ..core.result import Artifact, Delegation, OpCount, Record, Status, Verification
from ..core.spec import ExportConfig, ModelSpec, Precision, Target
from ..families import family

FORMAT = 1


def artifacts_dir() -> Path:
    return cache_root() / "artifacts"


def _file_sha(path: str) -> str:
    """sha256 of a file, computed once per version of it: a file edited while this process
    lives (a notebook calling ``pteforge.export`` again) is hashed again."""
    st = os.stat(path)
    return _sha_of(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=None)
def _sha_of(path: str, mtime_ns: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=1)
def code_hash() -> str:
    """sha256 over pteforge's own source: a code change invalidates every entry."""
    root = Path(__file__).parents[1]  # the package, not this folder
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def plugin_code(backends: Iterable[str], category: str | None) -> dict[str, str]:
    """sha256 over the source of each third-party plugin among ``backends`` and the
    family of ``category`` (those entry points load): its whole package, so that an edit
    anywhere in it makes a new key, as an edit of pteforge's own source does (``code_hash``)."""
    from ..backends import default_registry

    registry = default_registry()
    objects = [registry.get(b) for b in backends if b in registry] + [family(category)]
    found = {}
    for module in sorted({type(o).__module__ for o in objects}):
        top = module.split(".")[0]
        if top != __name__.split(".")[0]:
            found[top] = _package_sha(top)
    return found


@lru_cache(maxsize=None)
def _package_sha(top: str) -> str:
    spec = importlib.util.find_spec(top)
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    files = sorted((p.relative_to(r).as_posix(), p) for r in roots for p in r.rglob("*.py")) if roots else \
        [(Path(spec.origin).name, Path(spec.origin))] if spec and spec.origin else []
    h = hashlib.sha256()
    for name, path in files:  # by its place in the package: a module moved is a new key too
        h.update(name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def model_identity(spec: ModelSpec, weights: str, seed: int) -> dict:
    ident: dict = {"name": spec.name, "source": spec.source, "factory": spec.factory}
    if spec.source in ("pt2", "onnx", "torchscript", "ultralytics") and spec.path:
        ident[spec.source] = _file_sha(spec.path)
    elif spec.source == "factory":
        from ..models.factory import factory_sources, parse_factory

        files, packages = factory_sources(parse_factory(spec.factory)[0])
        ident["code"] = sorted(_file_sha(f) for f in files)  # its own files, by content: wherever they move
        ident["libraries"] = {p: _library_version(p) for p in packages}
    if weights in ("pretrained", "none"):
        ident["weights"] = weights  # pretrained: pinned by the library versions in the key
        if weights == "none":
            ident["seed"] = seed
    else:
        ident["weights"] = _file_sha(str(Path(weights).resolve()))
    return ident


@lru_cache(maxsize=None)
def _library_version(package: str) -> str:
    """The version of the distribution that installs top-level ``package`` (``sklearn``:
    scikit-learn's), or "unknown"."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        names = metadata.packages_distributions().get(package, [])  # ~0.4 s: only for a name unlike its own
        return ",".join(f"{n}=={metadata.version(n)}" for n in sorted(set(names))) or "unknown"


def key_for(spec: ModelSpec, target: Target, config: ExportConfig, versions: dict[str, str]) -> str:
    calibration = None
    if config.calibration_dir:
        from ..core import samples
        from ..families.vision import images_in

        files = sum(samples.split(config), []) if samples.holds_samples(config.calibration_dir) \
            else images_in(Path(config.calibration_dir), config.calibration_samples)
        calibration = [_file_sha(str(p)) for p in files]
    facts = {
        "format": FORMAT,
        "code": code_hash(),
        "plugins": plugin_code(target.backends, spec.family),
        "versions": versions,
        "model": model_identity(spec, config.weights, config.seed),
        "inputs": [asdict(i) for i in spec.inputs],
        "preprocessing": asdict(spec.preprocessing) if spec.preprocessing else None,
        # what the capture checks a row against (the labels' count against the output: a
        # refusal): a row restored from the cache was checked against these very ones
        "task": [spec.family, spec.task],
        "labels": list(spec.names) if spec.names else spec.labels,
        "target": target.name,
        # every option that defines the artifact; files by their content
        "options": {**config.artifact_options(), "weights": model_identity(spec, config.weights, config.seed)["weights"],
                    "calibration_dir": calibration},
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()


def store(key: str, record: Record, update: bool = False) -> None:
    """Keep a finished row: its program (hard-linked when possible), bundle and record.
    ``update``: an entry that exists gets this record (e.g. with its p50 measured since)."""
    if record.artifact is None or not record.status.ok:
        return
    final = artifacts_dir() / key
    if final.exists():
        if update:
            from ..core.io import keep

            try:
                created = json.loads((final / "record.json").read_text())["created"]
            except (OSError, ValueError, KeyError):
                return
            keep(final / "record.json", json.dumps({"created": created, "record": record_to_dict(record)}))
        return
    tmp = artifacts_dir() / f".{key}.{os.getpid()}.tmp"
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        link_or_copy(Path(record.artifact.path), tmp / "program.pte")
        if record.bundle:
            link_or_copy(Path(record.bundle["file"]), tmp / "program.bpte")
        (tmp / "record.json").write_text(json.dumps({"created": time.time(), "record": record_to_dict(record)}))
        os.rename(tmp, final)  # atomic: a reader sees a whole entry or none
    except OSError:
        pass  # a cache that cannot be written is no reason to fail an export
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def holds(key: str) -> bool:
    """Whether the cache has an entry for ``key`` (``--dry-run``'s count; ``restore`` checks
    its bytes)."""
    entry = artifacts_dir() / key
    return (entry / "record.json").is_file() and (entry / "program.pte").is_file()


def restore(key: str, path: Path) -> Record | None:
    """The cached row for ``key`` with its program written to ``path``; None on a miss."""
    from ..core.io import write_atomic

    entry = artifacts_dir() / key
    try:
        saved = json.loads((entry / "record.json").read_text())
        data = (entry / "program.pte").read_bytes()
    except (OSError, ValueError):
        return None
    record = record_from_dict(saved["record"])
    assert record.artifact is not None  # store() keeps rows with a program only
    if hashlib.sha256(data).hexdigest() != record.artifact.sha256:
        return None  # damaged entry: do the work
    t0 = time.perf_counter()
    if not _same_file(entry / "program.pte", path):  # unchanged out/ file: the cache's own hard link
        _place(entry / "program.pte", path, data)
    record.artifact.path = str(path)
    if record.bundle:
        bpte = path.with_suffix(".bpte")
        write_atomic(bpte, (entry / "program.bpte").read_bytes())
        record.bundle = {**record.bundle, "file": str(bpte)}
    original = round(sum(record.timings.values()), 3)
    record.timings = {"cache": round(time.perf_counter() - t0, 3)}
    record.cache = {"hit": True, "key": key[:16], "created": _iso(saved["created"]), "original_seconds": original}
    return record


def info() -> tuple[int, int]:
    """(entries, bytes) in the cache."""
    root = artifacts_dir()
    if not root.exists():
        return 0, 0
    entries = sum(1 for p in root.iterdir() if p.is_dir())
    return entries, sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def clear() -> tuple[int, int]:
    """Empty the cache: (entries, bytes) removed."""
    removed = info()
    shutil.rmtree(artifacts_dir(), ignore_errors=True)
    from ..backends._arm import vela_store

    shutil.rmtree(vela_store(), ignore_errors=True)  # the TOSA graphs behind Ethos-U streams
    return removed


def _place(src: Path, dst: Path, data: bytes) -> None:
    """``dst`` becomes a hard link of the cache's file (renamed into place), or a copy."""
    from ..core.io import write_atomic

    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.link")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, tmp)
        os.replace(tmp, dst)
    except OSError:
        tmp.unlink(missing_ok=True)
        write_atomic(dst, data)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def record_to_dict(record: Record) -> dict:
    d = asdict(record)
    d["status"] = record.status.value
    return d


def record_from_dict(d: dict) -> Record:
    d = dict(d)
    d["status"] = Status(d["status"])
    if d.get("artifact"):
        a = dict(d["artifact"])
        deleg = dict(a["delegation"])
        deleg["portable_ops"] = [OpCount(**o) for o in deleg["portable_ops"]]
        a["delegation"] = Delegation(**deleg)
        d["artifact"] = Artifact(**a)
    if d.get("verification"):
        d["verification"] = Verification(**d["verification"])
    if d.get("target_spec"):
        t = d["target_spec"]
        d["target_spec"] = Target(tuple(t["backends"]), Precision(t["precision"]), t["default_precision"])
    return Record(**d)
