"""``pteforge publish OUT --site DIR``: lay out artifacts as the executorch_flutter app fetches them.

The app reads ``<base>/versions.json`` (``{"versions": [...], "latest": "..."}``), picks
the version of its native ExecuTorch library, and reads ``<base>/<version>/index.json``;
it downloads every ``remoteUrl`` and ``labelsRemoteUrl`` as written. ``publish`` copies
the artifacts of ``OUT`` into ``DIR/<version>/`` for every runtime version that loads
them (``runtimes_for``: ExecuTorch's runtime compatibility policy), writes each version's
``index.json`` (merged with what it held: other artifacts of that version are kept) and
adds the versions to ``DIR/versions.json``.

The site is treated as served (docs/site-safety.md):

* nothing in it is followed: a symbolic link (or a FIFO, socket, device) at any path
  publish reads, writes or descends into below ``DIR`` is refused in one line; nothing
  is written through a link and none is left. ``DIR`` itself is resolved once.
* a version directory and ``versions.json`` are built in a staging directory beside the
  site, ``.<name>.pteforge-staging`` in its parent (a web server serving ``DIR`` does not
  serve its parent), and renamed in; only where that parent cannot be written or lies on
  another file system (``DIR`` a mount point) does staging go to ``DIR/.pteforge-staging``.
  A reader sees a version before or after, never half of it.
* a publish killed at any moment leaves staging behind (and, where the OS cannot swap two
  directories in one step, a version moved aside into it); the next publish puts such a
  version back and removes the staging, the old in-site ``.<version>.<id>.tmp``/``.old``
  directories included, before anything else, so a killed publish then run again leaves the
  site as that second run alone would have.
* publishes into one site take turns on a lock on the site directory itself
  (``directory_lock``), whatever their caches, users or processes; no lock file is left in it.
* files come from ``OUT`` as copies (``OUT``'s are often hard links of the cache's); the
  files a version keeps are hard links of its own only where no other path links them.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..core.errors import ManifestError, OutputError, UsageError
from ..core.fallback import fallback_table
from ..core.io import (
    directory_lock,
    link_unshared_or_copy,
    replace_durably,
    write_atomic,
)
from ..core.spec import check_base_url
from ..core.system import rename_exchange
from ..report.manifest import ENTRY_LISTS, MANIFEST_NAME, Manifest, ModelEntry, load_manifest, now, refuse_changed
from .platforms import fallback_tables

VERSIONS_NAME = "versions.json"
STAGING_NAME = ".pteforge-staging"  # DIR/.pteforge-staging, or .<DIR's name>.pteforge-staging beside DIR
_LEGACY_RE = re.compile(r"^\.(?P<version>.+)\.[0-9a-f]{8}\.(?P<kind>tmp|old)$")  # what publish built in DIR before
_LEGACY_TMP_RE = re.compile(r"^\.versions\.json\..+\.tmp$")  # write_atomic's temporary of DIR/versions.json
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
    base_url: str | None = None  # the URL the site is served at; None: relative remoteUrl (--relative)
    base_from: str | None = None  # where base_url came from: "--base-url", or the export's manifest
    manifest: Path | None = None  # the export's manifest that was published


def _release(version: str, what: str) -> tuple[int, int, int]:
    found = _RELEASE_RE.match(version)
    if not found:
        raise UsageError(f"{what} {version} is not an ExecuTorch release (MAJOR.MINOR.PATCH)", fix=f"use e.g. {what} 1.5.1"
                         if what.startswith("--") else "name the app runtimes' versions: --runtime V [V ...]")
    major, minor, patch = (int(n) for n in found.groups())  # _RELEASE_RE: three numbers
    return major, minor, patch


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
    """Refuse, before any work, a site that cannot be a directory, or whose versions are links."""
    existing = Path(site)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == Path(site) else f"is under {existing}, a file"
        raise UsageError(f"{flag} {site} {what}, not a directory", fix=f"give {flag} a directory")
    if not os.access(existing, os.W_OK):
        raise UsageError(f"{flag} {site} is not writable", fix=f"give {flag} a directory you can write")
    if existing == Path(site):
        try:
            names = [e.name for e in os.scandir(site) if e.name == VERSIONS_NAME or _RELEASE_RE.match(e.name)]
        except OSError:
            return  # publish says why, under its lock
        for name in names:
            _refuse_link(Path(site) / name)


def check_apart(out: Path, site: Path, flag: str = "--site") -> None:
    """Refuse a site that is the export's folder, lies inside it or holds it: the site would
    serve the export's reports and logs, and its index with the full paths it keeps."""
    here, there = Path(os.path.realpath(out)), Path(os.path.realpath(site))
    if here == there or here in there.parents or there in here.parents:
        raise UsageError(f"{flag} {site} and the export's folder {out} overlap: the site would serve the export's "
                         "reports and its index's full paths", fix=f"give {flag} a folder apart from the export's, "
                                                                    "e.g. public")


def publish(out: Path, site: Path, runtimes: list[str] | None = None, base_url: str | None = None,
            relative: bool = False) -> Published:
    """Publish the export whose manifest is ``out`` (an ``index.json``, or its directory) into
    ``site``; ``base_url`` by default the one the export recorded (its ``--base-url``)."""
    if base_url is not None:
        check_base_url(base_url, "--base-url")
    check_site(site)
    index, manifest = read_export(out)
    check_apart(index.parent, site)
    refuse_changed(index, manifest.changed(index.parent), "publish")
    _refuse_disk_folders(index, manifest)
    base_url, base_from = _base_url(base_url, relative, manifest, index)
    made_with = _executorch_version(manifest)
    runtimes = runtimes_for(made_with, runtimes)
    root = _site_root(Path(site))
    try:
        with directory_lock(root):
            files, listed = _publish_locked(index, manifest, root, runtimes, base_url)
    except OSError as exc:
        raise OutputError(f"cannot publish into {site}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else ""),
                          fix=f"check that you can write {site} and the directory it is in") from None
    return Published(made_with, runtimes, files, listed, listed[-1], base_url, base_from, index)


def read_export(out: Path) -> tuple[Path, Manifest]:
    """(the manifest's path, the manifest) of the export ``out`` names: an ``index.json`` (or
    another manifest file), or the directory holding one, as ``select`` and ``manifest check`` take."""
    out = Path(out)
    index = out / MANIFEST_NAME if out.is_dir() else out
    manifest = load_manifest(index)
    if manifest is None:
        folder = out if out.suffix != ".json" else out.parent
        raise UsageError(f"no manifest at {index}", fix=f"give an export's index.json or its directory, or export first: "
                         f"pteforge export --out {folder}")
    return index, manifest


def _base_url(given: str | None, relative: bool, manifest: Manifest, index: Path) -> tuple[str | None, str | None]:
    """The URL the site is served at, and where it came from: ``--base-url``, else (unless
    ``--relative``) the one the export recorded in its manifest; refused when there is none."""
    if given is not None:
        return given, "--base-url"
    if relative:
        return None, None
    if manifest.baseUrl:
        try:
            check_base_url(manifest.baseUrl, "--base-url")
        except UsageError:
            raise UsageError(f"no --base-url, and the baseUrl {index} records ({manifest.baseUrl!r}) is not an http(s) "
                             "URL the app can download from", fix="give --base-url URL (where the site will be "
                             "served), or --relative if the app is given relative URLs on purpose") from None
        return manifest.baseUrl, str(index)
    example = next((f" (e.g. {e.file})" for e in manifest.artifacts()), "")
    raise UsageError(f"no --base-url, and {index} records none (its export had no --base-url): every remoteUrl "
                     f"published would be a relative path{example}, and the executorch_flutter app downloads "
                     "remoteUrl as it is", fix="give --base-url URL (where the site will be served), or --relative "
                     "if the app is given relative URLs on purpose")


def _site_root(site: Path) -> Path:
    """``site`` made, and resolved once: the path the user gave may be a link; nothing below it may."""
    try:
        site.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot make --site {site}: {exc.strerror}", fix="give --site a directory you can write") from None
    return Path(os.path.realpath(site))


def published_site(path: Path) -> Path | None:
    """The published site ``path`` lies in: itself, or the nearest directory above it, holding
    publish's ``versions.json`` (what the app fetches first); None when there is none."""
    here = Path(os.path.realpath(path))
    for folder in (here, *here.parents):
        if (folder / VERSIONS_NAME).is_file():
            with contextlib.suppress(ManifestError, OSError):
                read_versions(folder)
                return folder
    return None


def _publish_locked(index: Path, manifest: Manifest, site: Path, runtimes: list[str],
                    base_url: str | None) -> tuple[int, list[str]]:
    """The publish proper, holding the site's lock: (files copied, versions listed);
    ``index``: the export's manifest, whose directory holds its files."""
    staging = _fresh_staging(site)
    try:
        _refuse_unless_file(site / VERSIONS_NAME)
        for version in runtimes:  # all of them before any is swapped in: a refusal changes nothing
            _check_version(site / version, version)
        versions = read_versions(site)
        files = 0
        for version in runtimes:
            files = _publish_version(index, manifest, site, staging, version, base_url)
        listed = sorted(set(versions) | set(runtimes), key=_version_key)
        write_atomic(staging / VERSIONS_NAME, json.dumps({"versions": listed, "latest": listed[-1]}, indent=2) + "\n")
        replace_durably(staging / VERSIONS_NAME, site / VERSIONS_NAME)
    finally:
        with contextlib.suppress(OSError, OutputError):  # what is left, the next publish removes
            _clear_stale(staging, site)  # a version moved aside and not replaced goes back
    return files, listed


def _publish_version(index: Path, manifest: Manifest, site: Path, staging: Path, version: str, base_url: str | None) -> int:
    """``site/version`` with the artifacts of the manifest ``index``, built in ``staging`` and
    swapped in whole; the files copied."""
    target, built = site / version, staging / version
    _check_version(target, version)
    if target.is_dir():
        _carry_over(target, built)  # what the version held, checked again on the way: kept files cost nothing
    else:
        built.mkdir()
    current = load_manifest(built / MANIFEST_NAME)  # read from the checked copy, never through a link
    files = _copy_files(index, manifest, built)
    merged = _site_index(manifest, current, base_url.rstrip("/") + f"/{version}" if base_url else None)
    write_atomic(built / MANIFEST_NAME, merged.model_dump_json(indent=2, exclude_none=True) + "\n")
    _swap(built, target, staging)
    return files


def _check_version(target: Path, version: str) -> None:
    """Refuse a version that is a link, not a directory, or holds a link or special file."""
    _refuse_link(target)
    if os.path.lexists(target) and not target.is_dir():
        raise OutputError(f"{target} is not a directory, where publish keeps version {version}",
                          fix=f"move {target} away, then publish again")
    for dirpath, dirnames, filenames in os.walk(target):  # never into a link: os.walk lists it, does not follow
        for name in dirnames:
            _refuse_link(Path(dirpath) / name)
        for name in filenames:
            _refuse_unless_file(Path(dirpath) / name)


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise OutputError(f"{path} is a symbolic link to {os.readlink(path)}: publish never follows a link in the site "
                          "it serves", fix=f"replace the link {path} by a copy of what it points to (or remove it), "
                          "then publish again")


def _refuse_unless_file(path: Path) -> None:
    """Refuse a link, a directory or a special file (a FIFO would hang the read) where a file is read."""
    _refuse_link(path)
    if os.path.lexists(path) and not path.is_file():
        raise OutputError(f"{path} is not a regular file", fix=f"move {path} away, then publish again")


def _carry_over(src: Path, dst: Path) -> None:
    """``dst`` a copy of the version directory ``src``, refusing any link or special file in
    it at any depth. Its files are hard links where the site's alone (a file of the site is
    replaced, never rewritten), copies where another path links them (maybe from outside)."""
    dst.mkdir()
    with os.scandir(src) as entries:
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                _refuse_link(path)
            elif entry.is_dir(follow_symlinks=False):
                _carry_over(path, dst / entry.name)
            elif entry.is_file(follow_symlinks=False):
                link_unshared_or_copy(path, dst / entry.name)
            else:
                _refuse_unless_file(path)


def _fresh_staging(site: Path) -> Path:
    """An empty staging directory for ``site``, after what killed publishes left is undone:
    beside the site where its parent takes it on the same file system, else inside it."""
    beside = site.parent / f".{site.name}{STAGING_NAME}"
    inside = site / STAGING_NAME
    for stale in (beside, inside) if site.parent != site else (inside,):
        _clear_stale(stale, site)
    _clear_legacy(site)
    if site.parent != site and os.access(site.parent, os.W_OK):
        with contextlib.suppress(OSError):
            beside.mkdir()
            if beside.stat().st_dev == site.stat().st_dev:  # renames from it into the site stay renames
                return beside
            beside.rmdir()
    inside.mkdir()
    return inside


def _clear_stale(staging: Path, site: Path) -> None:
    """Remove a staging directory a killed publish left, first putting back in ``site`` any
    version it had moved aside (``old/<version>``) and not replaced."""
    _refuse_link(staging)
    if not os.path.lexists(staging):
        return
    if not staging.is_dir():
        raise OutputError(f"{staging} is not a directory, where publish stages {site}",
                          fix=f"move {staging} away, then publish again")
    old = staging / "old"
    if old.is_dir() and not old.is_symlink():
        for entry in os.scandir(old):
            _restore(Path(entry.path), site / entry.name)
    shutil.rmtree(staging)


def _clear_legacy(site: Path) -> None:
    """Remove what a killed publish of an earlier pteforge left in ``site`` itself
    (``.<version>.<id>.tmp``, ``.<version>.<id>.old``, ``.versions.json.*.tmp``)."""
    with os.scandir(site) as entries:
        found = [(Path(e.path), _LEGACY_RE.match(e.name)) for e in entries
                 if _LEGACY_RE.match(e.name) or _LEGACY_TMP_RE.match(e.name)]
    for path, legacy in found:
        _refuse_link(path)
        if legacy and legacy["kind"] == "old" and path.is_dir():
            _restore(path, site / legacy["version"])
        if path.is_dir():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()


def _restore(moved: Path, target: Path) -> None:
    """``moved`` (a version moved aside) back at ``target``, where nothing replaced it."""
    _refuse_link(moved)
    if moved.is_dir() and not os.path.lexists(target):
        os.rename(moved, target)


def _executorch_version(manifest: Manifest) -> str:
    found = {v for e in manifest.artifacts() if (v := e.versions.get("executorch")) is not None}
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


def _copy_files(index: Path, manifest: Manifest, built: Path) -> int:
    """Every file the manifest ``index`` points at, copied under the same relative path (what
    a link in its directory ``out`` points to, never the link). Copied, not linked: ``out``'s files are often hard
    links of the cache's, whose inodes would then be served. A file ``built`` kept (a hard
    link of the live version's) is unlinked first, never written through."""
    rels = _served_files(manifest)
    out = index.parent
    for rel in sorted(rels):
        src, dst = out / rel, built / rel
        if not src.is_file():
            raise UsageError(f"{src} is listed in {index} but missing", fix="export again, then publish")
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.unlink(missing_ok=True)
        shutil.copyfile(src, dst)
    return len(rels)


def _served_files(manifest: Manifest) -> set[str]:
    """The files of an export a site serves, relative to its folder: programs, bundles, labels."""
    rels = {e.file for e in manifest.artifacts()} | {e.bundle["file"] for e in manifest.artifacts() if e.bundle}
    return rels | {lab.file for lab in manifest.labels} | {e.labelsFile for e in manifest.artifacts() if e.labelsFile}


def _refuse_disk_folders(index: Path, manifest: Manifest) -> None:
    """Refuse, before any work, an export with a file that names a folder of the disk it was
    made or is published on: where its index says the model's files lie, the export's own
    folder, the home folder, the Python environment's. A site would serve that path to every
    app that downloads the file: a backend that writes the model's Python stacks into its
    program (Core AI's debug conversion did, pteforge converts in release mode) leaks them."""
    folders = _disk_folders(index, manifest)
    backends = {e.file: e.backend for e in manifest.artifacts()}
    for rel in sorted(_served_files(manifest)):
        found = _named_folder(index.parent / rel, folders)
        if found is not None:
            fix = (f"export it again, leaving {backends[rel]} out (--backends) if its program still names it, then "
                   "publish" if rel in backends else "export it again, then publish")
            raise ManifestError(f"{index.parent / rel} names {found}, a folder of this machine's disk: the site would "
                                "serve that path to every app that downloads the file", fix=fix)


def _disk_folders(index: Path, manifest: Manifest) -> list[bytes]:
    """The folders ``_refuse_disk_folders`` looks for, each ending in its separator: none that
    another holds, and none as general as ``/tmp/`` (a home folder aside, two names deep)."""
    named = {folder for text in _strings(manifest.model_dump()) for folder in _LOCAL_FOLDER.findall(text)}
    home = os.path.join(str(Path.home()), "")
    named |= {home, os.path.join(sys.prefix, ""), os.path.join(str(index.parent.resolve()), "")}
    deep = {f for f in named if len(PurePath(f).parts) > 2 or (f == home and len(PurePath(f).parts) > 1)}
    return sorted(f.encode() for f in deep if not any(o != f and f.startswith(o) for o in deep))


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict | list):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def _named_folder(path: Path, folders: list[bytes]) -> str | None:
    """The first of ``folders`` the file at ``path`` holds, read through a memory map (a
    language model's file is gigabytes); None for a file that is not there (``_copy_files`` says so)."""
    if not path.is_file():
        return None
    with path.open("rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return next((folder.decode() for folder in folders if data.find(folder) != -1), None)


def _site_index(manifest: Manifest, current: Manifest | None, base: str | None) -> Manifest:
    """The version's index: ``manifest``'s entries over what the version held, in each of its
    lists (``ENTRY_LISTS``: the app's ``models``, ``references``, ``outOfBudget``, ``notForApp``,
    ``failed``: every file the version holds stays listed), URLs under ``base``."""

    def url(rel: str) -> str:
        return f"{base}/{rel}" if base else rel

    lists = {key: [_unplaced(e).model_copy(update={"remoteUrl": url(e.file), "labelsRemoteUrl": url(e.labelsFile)
                                                   if e.labelsFile else None}) for e in getattr(manifest, key)]
             for key in ENTRY_LISTS}
    names = {e.name for entries in lists.values() for e in entries}  # an artifact listed anew, in whichever list
    keys = {(e.modelName, e.backend) for e in lists["models"]}  # the app's key: one entry each
    for key, new in lists.items():
        kept = [_unplaced(e) for e in (getattr(current, key) if current else []) if e.name not in names
                and (key != "models" or (e.modelName, e.backend) not in keys)]
        lists[key] = sorted([*kept, *new], key=lambda m: (m.category, m.base_model, m.name))
    labels = {lab.category: lab for lab in (current.labels if current else [])}
    labels.update({lab.category: lab.model_copy(update={"remoteUrl": url(lab.file)}) for lab in manifest.labels})
    chosen = {(c.get("model"), c.get("backend")) for c in manifest.precisionChoices}
    merged = manifest.model_copy(update={
        "generated": now(), "baseUrl": base or "", **lists, "labels": [labels[c] for c in sorted(labels, key=str)],
        "backends": {**(current.backends if current else {}), **manifest.backends},
        "precisionChoices": _unplaced([c for c in (current.precisionChoices if current else [])
                                       if (c.get("model"), c.get("backend")) not in chosen] + manifest.precisionChoices),
    })

    merged.fallback = fallback_table(merged.models, *fallback_tables())
    return merged


# A folder of the publisher's disk in a string: an absolute path (POSIX, or Windows' drive
# letter) up to its last separator; never a URL's (after "://" or a host name's letters).
_PART = r"[^\s\"'/\\:,;()]+"  # a folder's name, and the words of one with spaces ("Jane Doe")
_LOCAL_FOLDER = re.compile(rf"(?<![\w:/.~-])(?:/|[A-Za-z]:[\\/])(?:{_PART}(?: {_PART})*[\\/])+")


def _unplaced(value):
    """``value`` (an entry, a list, the text of a field) as a served site gives it: the folders
    on the publisher's disk taken out of every path it names (a model file, its weights, the
    calibration images), the file's own name kept. The export's index keeps them: validate
    rebuilds the model from there."""
    if isinstance(value, ModelEntry):
        data = value.model_dump(exclude_none=True)
        for key in ("source", "weights"):  # a path whole, spaces and all ("/Users/Jane Doe/net.py:build")
            if isinstance(data.get(key), str) and (data[key].startswith("/") or re.match(r"[A-Za-z]:[\\/]", data[key])):
                head, paren, args = data[key].partition("(")  # a factory's arguments, after its path
                data[key] = re.split(r"[\\/]", head)[-1] + paren + _unplaced(args)
        return ModelEntry.model_validate(_unplaced(data))
    if isinstance(value, str):
        return _LOCAL_FOLDER.sub("", value)
    if isinstance(value, dict):
        return {k: _unplaced(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplaced(v) for v in value]
    return value


def _swap(built: Path, target: Path, staging: Path) -> None:
    """``built`` becomes ``target`` in one step where the OS can (pteforge.core.system): the
    old contents end in ``built``, inside ``staging``. Elsewhere two renames, the old version
    moved aside to ``staging/old/`` first, where a killed publish's successor finds it."""
    if not os.path.lexists(target):
        os.rename(built, target)
        return
    if rename_exchange(os.fsencode(built), os.fsencode(target)):
        return
    old = staging / "old" / target.name
    old.parent.mkdir(exist_ok=True)
    os.rename(target, old)
    os.rename(built, target)


def _version_key(version: str):
    from packaging.version import InvalidVersion, Version

    try:
        return (1, Version(version), version)
    except InvalidVersion:
        return (0, None, version)
