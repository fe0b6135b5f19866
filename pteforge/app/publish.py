"""``pteforge publish OUT --site DIR``: lay out artifacts as the executorch_flutter app fetches them.

The app reads ``<base>/versions.json`` (``{"versions": [...], "latest": "..."}``), picks
the version of its native ExecuTorch library, and reads ``<base>/<version>/index.json``;
it downloads every ``remoteUrl`` and ``labelsRemoteUrl`` as written. ``publish`` copies
the artifacts of ``OUT`` into ``DIR/<version>/`` for every runtime version that loads
them (``runtimes_for``: ExecuTorch's runtime compatibility policy), writes each version's
``index.json`` (merged with what it held: other artifacts of that version are kept) and
adds the versions to ``DIR/versions.json``. A version directory is built beside the old
one and swapped in by rename, and ``versions.json`` is replaced atomically, so a reader
sees the site before or after, never half of it. The lock that keeps two publishes apart
lives in pteforge's cache, not in the site a web server serves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..core.io import path_lock
from ..core.errors import ManifestError, UsageError
from ..core.io import link_or_copy, write_atomic
from ..report.manifest import MANIFEST_NAME, Manifest, load_manifest, now
from ..core.spec import check_base_url

VERSIONS_NAME = "versions.json"
_RELEASE_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
POLICY = ("ExecuTorch's runtime compatibility policy (runtime/COMPATIBILITY.md): a program made with X.Y.Z "
          "loads in the runtimes of its minor release X.Y and of the next one, X.(Y+1)")


@dataclass
class Published:
    made_with: str
    runtimes: list[str]
    files: int
    versions: list[str]
    latest: str


def _release(version: str, what: str) -> tuple[int, int, int]:
    found = _RELEASE_RE.match(version)
    if not found:
        raise UsageError(f"{what} {version} is not an ExecuTorch release (MAJOR.MINOR.PATCH)", fix=f"use e.g. {what} 1.5.1"
                         if what.startswith("--") else "name the app runtimes' versions: --runtime V [V ...]")
    return tuple(int(n) for n in found.groups())


def runtimes_for(made_with: str, chosen: list[str] | None = None, flag: str = "--runtime") -> list[str]:
    """The runtime versions whose apps get artifacts made with ExecuTorch ``made_with``:
    ``chosen``, each checked against the policy, or by default the earlier patch releases
    of its minor release, itself and the next minor release (1.5.1: 1.5.0, 1.5.1, 1.6.0)."""
    release = made_with.split("+")[0]  # a local suffix (1.5.1+cpu) is not part of the release
    if not _RELEASE_RE.match(release) and chosen:  # a nightly or a source build: no policy to apply
        for version in chosen:
            _release(version, flag)
        return sorted(set(chosen), key=_version_key)
    major, minor, patch = _release(release, "the artifacts' ExecuTorch version")
    if not chosen:
        return [f"{major}.{minor}.{p}" for p in range(patch + 1)] + [f"{major}.{minor + 1}.0"]
    for version in chosen:
        r_major, r_minor, _ = _release(version, flag)
        if r_major != major or r_minor not in (minor, minor + 1):
            raise UsageError(f"{flag} {version} cannot load programs made with ExecuTorch {made_with}: {POLICY}",
                             fix=f"choose among {major}.{minor}.x and {major}.{minor + 1}.x, or export with ExecuTorch {version}")
    return sorted(set(chosen), key=_version_key)


def check_site(site: Path, flag: str = "--site") -> None:
    """Refuse, before any work, a site that cannot be a directory."""
    existing = Path(site)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == Path(site) else f"is under {existing}, a file"
        raise UsageError(f"{flag} {site} {what}, not a directory", fix=f"give {flag} a directory")
    if not os.access(existing, os.W_OK):
        raise UsageError(f"{flag} {site} is not writable", fix=f"give {flag} a directory you can write")


def publish(out: Path, site: Path, runtimes: list[str] | None = None, base_url: str | None = None,
            relative: bool = False) -> Published:
    if base_url is not None:
        check_base_url(base_url, "--base-url")
    elif not relative:
        raise UsageError("no --base-url: the executorch_flutter app downloads remoteUrl as it is, and a relative one "
                         "does not download", fix="give --base-url URL (where the site will be served), or --relative "
                         "if the app is given relative URLs on purpose")
    check_site(site)
    manifest = load_manifest(Path(out) / MANIFEST_NAME)
    if manifest is None:
        raise UsageError(f"no manifest at {Path(out) / MANIFEST_NAME}", fix="export first: pteforge export --out " + str(out))
    made_with = _executorch_version(manifest)
    runtimes = runtimes_for(made_with, runtimes)
    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    files = 0
    with path_lock(site):
        versions = read_versions(site)
        for version in runtimes:
            files = _publish_version(Path(out), manifest, site, version, base_url)
        listed = sorted(set(versions) | set(runtimes), key=_version_key)
        latest = listed[-1]
        write_atomic(site / VERSIONS_NAME, json.dumps({"versions": listed, "latest": latest}, indent=2) + "\n")
    return Published(made_with, runtimes, files, listed, latest)


def _publish_version(out: Path, manifest: Manifest, site: Path, version: str, base_url: str | None) -> int:
    """``site/version`` with ``out``'s artifacts, swapped in whole; the files copied."""
    target = site / version
    current = load_manifest(target / MANIFEST_NAME) if target.is_dir() else None
    staging = site / f".{version}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        if target.is_dir():
            shutil.copytree(target, staging, copy_function=link_or_copy)  # kept files cost nothing
        else:
            staging.mkdir()
        files = _copy_files(out, manifest, staging)
        index = _site_index(manifest, current, base_url.rstrip("/") + f"/{version}" if base_url else None)
        write_atomic(staging / MANIFEST_NAME, index.model_dump_json(indent=2, exclude_none=True) + "\n")
        _swap(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return files


def _executorch_version(manifest: Manifest) -> str:
    found = {e.versions.get("executorch") for e in manifest.artifacts()} - {None}
    if len(found) != 1:
        what = f"artifacts of several ExecuTorch versions ({', '.join(sorted(found))})" if found else "no ExecuTorch version"
        raise UsageError(f"the manifest names {what}", fix="export the artifacts again with one ExecuTorch version")
    return found.pop()


def read_versions(site: Path) -> list[str]:
    path = site / VERSIONS_NAME
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        versions = data["versions"]
        if not isinstance(data.get("latest"), str) or not all(isinstance(v, str) for v in versions):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise ManifestError(
            f"{path} is not a versions file ({{\"versions\": [...], \"latest\": \"...\"}})",
            fix=f"move {path} away or choose another --site",
        ) from None
    return list(versions)


def _copy_files(out: Path, manifest: Manifest, staging: Path) -> int:
    """Every file the manifest points at, under the same relative path (replaced, never
    written through a hard link into the live version)."""
    rels = {e.file for e in manifest.artifacts()} | {e.bundle["file"] for e in manifest.artifacts() if e.bundle}
    rels |= {lab.file for lab in manifest.labels} | {e.labelsFile for e in manifest.artifacts() if e.labelsFile}
    for rel in sorted(rels):
        src, dst = out / rel, staging / rel
        if not src.is_file():
            raise UsageError(f"{src} is listed in {out / MANIFEST_NAME} but missing", fix="export again, then publish")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.unlink(missing_ok=True)
        shutil.copyfile(src, dst)
    return len(rels)


def _site_index(manifest: Manifest, current: Manifest | None, base: str | None) -> Manifest:
    """The version's index: ``manifest``'s entries over what the version held, URLs under ``base``."""

    def url(rel: str) -> str:
        return f"{base}/{rel}" if base else rel

    new = [e.model_copy(update={"remoteUrl": url(e.file),
                                "labelsRemoteUrl": url(e.labelsFile) if e.labelsFile else None})
           for e in manifest.models]
    taken = {e.name for e in new} | {(e.modelName, e.backend) for e in new}
    kept = [e for e in (current.models if current else []) if e.name not in taken and (e.modelName, e.backend) not in taken]
    labels = {lab.category: lab for lab in (current.labels if current else [])}
    labels.update({lab.category: lab.model_copy(update={"remoteUrl": url(lab.file)}) for lab in manifest.labels})
    merged = manifest.model_copy(update={
        "generated": now(), "baseUrl": base or "", "models": sorted([*kept, *new], key=lambda m: (m.category, m.base_model, m.name)),
        "labels": [labels[c] for c in sorted(labels, key=str)],
        "backends": {**(current.backends if current else {}), **manifest.backends},
    })
    from ..core.fallback import fallback_table
    from .platforms import fallback_tables

    merged.fallback = fallback_table(merged.models, *fallback_tables())
    return merged


def _swap(staging: Path, target: Path) -> None:
    """``staging`` becomes ``target`` in one step where the OS can (pteforge.core.system); elsewhere
    two renames. The old contents end in ``staging`` and are removed by the caller."""
    from ..core.system import rename_exchange

    if not target.exists():
        os.rename(staging, target)
        return
    if rename_exchange(os.fsencode(staging), os.fsencode(target)):
        return
    old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
    os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)


def _version_key(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(version), version)
    except InvalidVersion:
        return (0, None, version)
