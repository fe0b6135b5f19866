"""``publish`` treats the site as served (docs/site-safety.md): no link in it is followed,
staging lies beside it, a killed publish run again leaves the site as one publish would,
and publishes into one site take turns on a lock on the site itself."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from flutter_app import CURRENT, assert_app_reads
from test_cli import TINY, cli, error_lines

from pteforge.core.errors import ExitStatus, OutputError
from pteforge.core.io import directory_lock

VERSIONS = ["1.5.0", "1.5.1", "1.6.0"]

# Runs ``python -m pteforge ARGS`` with pteforge's file system steps counted once publish()
# is entered (os.rename/replace/link/mkdir/unlink/rmdir/fsync, shutil.copyfile, the
# directory exchange): KILL_AT=k SIGKILLs the process at its k-th step, PAUSE_AT=k stops
# there (after touching PAUSED), STEP_SLEEP slows every step, GO waits for that file first,
# NO_EXCHANGE takes the two-rename path of an OS without renameat2. SWEEP_BASE/SWEEP_WORK:
# for k = 1, 2, ... until a run ends by itself, copy SWEEP_BASE to SWEEP_WORK/k/site and
# publish into it ("{site}" in ARGS) in a forked child killed at step k.
DRIVER = r'''
import os, runpy, shutil, signal, sys, time
from pathlib import Path
import pteforge.app.publish as P
import pteforge.core.system as S

state = {"on": False, "n": 0, "kill": int(os.environ.get("KILL_AT", "0"))}
PAUSE_AT, SLEEP = int(os.environ.get("PAUSE_AT", "0")), float(os.environ.get("STEP_SLEEP", "0"))

def step():
    if not state["on"]:
        return
    state["n"] += 1
    time.sleep(SLEEP)
    if state["n"] == state["kill"]:
        os.kill(os.getpid(), signal.SIGKILL)
    if state["n"] == PAUSE_AT:
        Path(os.environ["PAUSED"]).touch()
        time.sleep(3600)

def counted(fn):
    def wrapped(*args, **kwargs):
        step()
        return fn(*args, **kwargs)
    return wrapped

for name in ("rename", "replace", "link", "mkdir", "unlink", "rmdir", "fsync"):
    setattr(os, name, counted(getattr(os, name)))
shutil.copyfile = counted(shutil.copyfile)
S.rename_exchange = (lambda a, b: False) if os.environ.get("NO_EXCHANGE") else counted(S.rename_exchange)
real = P.publish

def publish(*args, **kwargs):
    state["on"], t0 = True, time.time()
    try:
        return real(*args, **kwargs)
    finally:
        state["on"] = False
        sys.stderr.write(f"span={t0},{time.time()} steps={state['n']}\n")

P.publish = publish
if os.environ.get("GO"):
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.01)
if os.environ.get("SWEEP_BASE"):
    from pteforge.cli import main
    warm = Path(os.environ["SWEEP_WORK"]) / "warm"  # every lazy import done once, not in each child
    main([a.replace("{site}", str(warm)) for a in sys.argv[1:]])
    shutil.rmtree(warm)
    for k in range(1, 1000):
        site = Path(os.environ["SWEEP_WORK"]) / str(k) / "site"
        shutil.copytree(os.environ["SWEEP_BASE"], site, symlinks=True)
        pid = os.fork()
        if pid == 0:
            state["kill"], state["n"] = k, 0
            os._exit(main([a.replace("{site}", str(site)) for a in sys.argv[1:]]))
        status = os.waitpid(pid, 0)[1]
        if os.WIFEXITED(status):
            print(f"swept={k}")
            sys.exit(os.WEXITSTATUS(status))
        assert os.WTERMSIG(status) == signal.SIGKILL, status
sys.argv = ["pteforge", *sys.argv[1:]]
runpy.run_module("pteforge", run_name="__main__")
'''


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Two models folders, one tiny artifact each (alpha, beta)."""
    from pteforge.cli import main

    made = {}
    for name in ("alpha", "beta"):
        made[name] = tmp_path_factory.mktemp(name)
        assert main([*TINY, "--backends", "portable", "--no-verify", "--name", name, "--out", str(made[name])]) == 0
    return made


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("driver") / "drive_publish.py"
    path.write_text(DRIVER)
    return path


def snapshot(root: Path) -> dict[str, object]:
    """Every path under ``root``: a link's target, a directory, or a file's bytes
    (an index's ``generated`` time masked: two publishes differ in nothing else)."""
    tree: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                tree[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                tree[rel] = "dir"
            else:
                tree[rel] = re.sub(rb'"generated": "[^"]*"', b'"generated": ""', path.read_bytes())
    return tree


def publish_args(out: Path, site: Path) -> list[str]:
    return ["publish", str(out), "--site", str(site), "--base-url", "https://models.example.org/pte"]


def env_for(cache: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PTEFORGE_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT), **extra}


def published(capsys, models: dict[str, Path], root: Path, *names: str) -> Path:
    """``root/site`` with ``names`` published in turn."""
    site = root / "site"
    for name in names:
        code, _, err = cli(capsys, *publish_args(models[name], site))
        assert code == ExitStatus.OK, err
    return site


def model_names(site: Path, version: str) -> set[str]:
    return {m.modelName for m in assert_app_reads(site / version / "index.json")[CURRENT].models}


def no_links(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.is_symlink()]


# where a link is planted in a site holding beta: (path in the site, what it replaces)
LINKS = ["versions.json", "1.5.0", "1.5.1/index.json", "1.5.1/custom/beta_portable.pte", "1.6.0/custom",
         "1.6.0/labels/coco_classes.txt", ".pteforge-staging", "../.site.pteforge-staging", ".1.5.0.deadbeef.tmp"]


@pytest.mark.parametrize("where", LINKS)
def test_a_link_where_publish_reads_writes_or_descends_is_refused(capsys, models, tmp_path, where):
    site = published(capsys, models, tmp_path / "w", "beta")
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = Path(os.path.normpath(site / where))
    planted.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(planted):
        shutil.move(planted, outside / planted.name)  # the link points at what was there, now outside
    else:
        (outside / planted.name).write_text("not the site's\n")
    planted.symlink_to(outside / planted.name)
    before, outside_before = snapshot(tmp_path / "w"), snapshot(outside)

    code, _, err = cli(capsys, *publish_args(models["alpha"], site))
    assert code == ExitStatus.OUTPUT, err
    [line] = error_lines(err)
    assert f"{planted} is a symbolic link to {outside / planted.name}" in line and "(fix: " in line, line
    assert snapshot(tmp_path / "w") == before, "nothing written, nothing staged, nothing left"
    assert snapshot(outside) == outside_before, "nothing written through the link"


def test_a_fifo_or_a_file_where_a_version_is_is_refused(capsys, models, tmp_path):
    site = published(capsys, models, tmp_path / "w", "beta")
    os.mkfifo(site / "1.5.0" / "custom" / "pipe")
    code, _, err = cli(capsys, *publish_args(models["alpha"], site))
    assert code == ExitStatus.OUTPUT and f"{site / '1.5.0' / 'custom' / 'pipe'} is not a regular file" in err, err
    (site / "1.5.0" / "custom" / "pipe").unlink()
    shutil.rmtree(site / "1.5.1")
    (site / "1.5.1").write_text("")
    code, _, err = cli(capsys, *publish_args(models["alpha"], site))
    assert code == ExitStatus.OUTPUT, err
    assert f"{site / '1.5.1'} is not a directory, where publish keeps version 1.5.1 (fix: move" in error_lines(err)[0]


def test_no_file_linked_from_outside_the_site_and_no_link_left(capsys, models, tmp_path):
    """A kept file another path links (maybe from outside) is copied, not linked again; the
    models folder's files (hard links of the cache's) are copied; a link there is read, not kept."""
    site = published(capsys, models, tmp_path / "w", "beta")
    kept = site / "1.5.0" / "custom" / "beta_portable.pte"
    os.link(kept, tmp_path / "elsewhere.pte")
    alpha = tmp_path / "alpha"
    shutil.copytree(models["alpha"], alpha)
    pte = alpha / "custom" / "alpha_portable.pte"
    real = alpha / "kept" / "real.pte"  # a link out of the models folder is refused by its manifest check
    real.parent.mkdir()
    shutil.move(pte, real)
    pte.symlink_to(real)

    assert cli(capsys, *publish_args(alpha, site))[0] == ExitStatus.OK
    assert kept.stat().st_ino != (tmp_path / "elsewhere.pte").stat().st_ino and kept.stat().st_nlink == 1
    for version in VERSIONS:
        copied = site / version / "custom" / "alpha_portable.pte"
        assert not copied.is_symlink() and copied.stat().st_nlink == 1
        assert copied.read_bytes() == real.read_bytes()
    assert no_links(site)


def test_what_killed_publishes_left_is_undone_first(capsys, models, tmp_path):
    """Stale staging beside the site and inside it, and the in-site names of earlier
    pteforge (``.<version>.<id>.tmp``, a version moved aside as ``.<version>.<id>.old``)."""
    expected = published(capsys, models, tmp_path / "expected", "beta", "alpha")
    site = published(capsys, models, tmp_path / "w", "beta")
    (site / ".1.5.0.deadbeef.tmp" / "custom").mkdir(parents=True)
    (site / ".versions.json.x.k2j_9ab1.tmp").write_text("{")
    os.rename(site / "1.5.1", site / ".1.5.1.cafe0123.old")  # killed between the old two renames
    (tmp_path / "w" / ".site.pteforge-staging" / "1.6.0").mkdir(parents=True)
    (site / ".pteforge-staging" / "old").mkdir(parents=True)

    assert cli(capsys, *publish_args(models["alpha"], site))[0] == ExitStatus.OK
    assert snapshot(tmp_path / "w") == snapshot(tmp_path / "expected")
    assert model_names(site, "1.5.1") == {"alpha", "beta"}, "the version moved aside was put back, then merged"
    assert expected.exists()


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_killed_at_every_step_then_run_again_is_one_publish(capsys, models, driver, tmp_path, exchange):
    """A publish SIGKILLed at each of its file system steps in turn, then run again, leaves
    the site and its parent byte for byte as one publish does."""
    base = published(capsys, models, tmp_path / "base", "beta")
    shutil.copytree(base, tmp_path / "expected" / "site")
    assert cli(capsys, *publish_args(models["alpha"], tmp_path / "expected" / "site"))[0] == ExitStatus.OK
    expected = snapshot(tmp_path / "expected")
    extra = {"SWEEP_BASE": str(base), "SWEEP_WORK": str(tmp_path / "k")} | ({} if exchange else {"NO_EXCHANGE": "1"})
    proc = subprocess.run([sys.executable, str(driver), *publish_args(models["alpha"], Path("{site}"))],
                          capture_output=True, text=True, env=env_for(tmp_path / "cache", **extra), timeout=300)
    assert proc.returncode == 0, proc.stderr
    swept = int(re.search(r"swept=(\d+)", proc.stdout).group(1))
    assert swept > 30, "a kill before every step of the publish"
    for k in range(1, swept + 1):
        assert cli(capsys, *publish_args(models["alpha"], tmp_path / "k" / str(k) / "site"))[0] == ExitStatus.OK
        assert snapshot(tmp_path / "k" / str(k)) == expected, f"killed at step {k}, then run again"


def test_a_publish_killed_from_outside_mid_way_then_run_again(models, driver, tmp_path, capsys):
    """As a user would: ``python -m pteforge publish`` SIGKILLed while its staging exists."""
    base = published(capsys, models, tmp_path / "w", "beta")
    shutil.copytree(base, tmp_path / "expected" / "site")
    assert cli(capsys, *publish_args(models["alpha"], tmp_path / "expected" / "site"))[0] == ExitStatus.OK
    paused = tmp_path / "paused"
    proc = subprocess.Popen([sys.executable, str(driver), *publish_args(models["alpha"], base)],
                            env=env_for(tmp_path / "c1", PAUSE_AT="20", PAUSED=str(paused)))
    try:
        deadline = time.monotonic() + 60
        while not paused.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert paused.exists() and (tmp_path / "w" / ".site.pteforge-staging").is_dir(), "staged beside the site"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    again = subprocess.run([sys.executable, "-m", "pteforge", *publish_args(models["alpha"], base)],
                           capture_output=True, text=True, env=env_for(tmp_path / "c2"), timeout=120)
    assert again.returncode == 0, again.stderr
    assert snapshot(tmp_path / "w") == snapshot(tmp_path / "expected")


def test_concurrent_publishes_from_two_caches_keep_both_models(models, driver, tmp_path):
    """Two processes, two models folders, two caches, one site: both start at once, their
    publishes overlap in time (each step slowed), and every version lists both models."""
    site, go = tmp_path / "site", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(driver), *publish_args(models[name], site)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env_for(tmp_path / f"cache-{name}", GO=str(go), STEP_SLEEP="0.01"))
             for name in ("alpha", "beta")]
    time.sleep(0.5)
    go.touch()
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    spans = [tuple(map(float, re.search(r"span=([\d.]+),([\d.]+)", err).groups())) for _, err in results]
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"the publishes overlap in time: {spans}"
    for version in VERSIONS:
        assert model_names(site, version) == {"alpha", "beta"}, version
    assert json.loads((site / "versions.json").read_text())["versions"] == VERSIONS
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no lock file or staging beside the site"
    assert not [p for p in site.rglob("*") if p.name.startswith(".")], "no lock file or staging in it"


def test_a_publish_waits_for_the_sites_lock_whatever_its_cache(models, tmp_path):
    """The lock is the site directory's own: held here (this test's cache), a publish with
    another cache waits, then runs; no lock file appears in the site or beside it."""
    site = tmp_path / "site"
    site.mkdir()
    with directory_lock(site):
        proc = subprocess.Popen([sys.executable, "-m", "pteforge", *publish_args(models["alpha"], site)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(tmp_path / "other"))
        time.sleep(3)
        assert proc.poll() is None and not (site / "versions.json").exists(), "it waits"
        assert not list(site.iterdir()) and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert model_names(site, "1.6.0") == {"alpha"}


@pytest.mark.parametrize("fallback", ["flock", "no-directory-flock", "windows"])
def test_the_lock_excludes_and_says_so_in_one_line(monkeypatch, tmp_path, fallback):
    """flock on the directory; where a file system refuses it (NFS) or there is no flock
    (Windows), a lock file beside the directory, never in it."""
    import errno

    import fcntl

    if fallback == "no-directory-flock":
        real = fcntl.flock

        def flock(fd, op):
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                raise OSError(errno.ENOLCK, "No locks available")
            return real(fd, op)

        monkeypatch.setattr(fcntl, "flock", flock)
    elif fallback == "windows":
        monkeypatch.setitem(sys.modules, "fcntl", None)
    site = tmp_path / "site"
    site.mkdir()
    with directory_lock(site):
        with pytest.raises(OutputError) as refused:
            with directory_lock(site, timeout=0.2):
                pass
        assert not list(site.iterdir())
        assert (tmp_path / ".site.pteforge-lock").exists() == (fallback != "flock"), "beside the site, if any"
    assert refused.value.one_line() == (f"another process has been writing {site} for over 0 s "
                                        "(fix: wait for it to finish (or end it), then try again)")
    with directory_lock(site, timeout=0.2):
        pass  # released


def test_a_file_changed_since_its_export_is_refused_not_published(capsys, models, tmp_path):
    """A listed file that is not the one its entry lists (another sha256, another size) is
    refused by publish (nothing written), by manifest check, and failed by validate and bench
    (never timed into its entry); put back, it publishes."""
    out = tmp_path / "alpha"
    shutil.copytree(models["alpha"], out)
    pte = out / "custom" / "alpha_portable.pte"
    good = pte.read_bytes()
    pte.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit, the same size
    site = published(capsys, models, tmp_path / "w", "beta")
    before = snapshot(tmp_path / "w")
    code, _, err = cli(capsys, *publish_args(out, site))
    assert code == ExitStatus.MANIFEST, err
    [line] = error_lines(err)
    assert f"{pte} differs from its manifest entry (another sha256, the same size)" in line and "(fix: export it" in line
    assert snapshot(tmp_path / "w") == before, "nothing published, nothing staged"
    pte.write_bytes(good[:100])
    code, _, err = cli(capsys, "manifest", "check", out)
    assert code == ExitStatus.MANIFEST and f"{pte} is 100 bytes, not the {len(good):,} its manifest" in err, err
    code, stdout, _ = cli(capsys, "-q", "validate", out)
    assert code == ExitStatus.TARGETS_FAILED
    assert "alpha_portable.pte: LOAD_FAILED: " in stdout and "; the file is 100 bytes, not the" in stdout, stdout
    code, stdout, _ = cli(capsys, "bench", out, "--runs", "1")
    assert code == ExitStatus.TARGETS_FAILED and "LOAD_FAILED: the file is 100 bytes, not the" in stdout, stdout
    pte.write_bytes(good)
    assert cli(capsys, *publish_args(out, site))[0] == ExitStatus.OK
    assert model_names(site, "1.6.0") == {"alpha", "beta"}


def test_the_site_names_no_folder_of_the_publishers_disk(capsys, models, tmp_path):
    """A served index gives the files that made a program by name (its model file, weights,
    calibration images), never where they lie on the publisher's disk; the export's own
    index keeps the paths validate rebuilds the model from."""
    out = tmp_path / "alpha"
    shutil.copytree(models["alpha"], out)
    index = json.loads((out / "index.json").read_text())
    [entry] = index["models"]
    entry.update(source="/home/Jane Doe/secret/net.py:build(labels='/home/Jane Doe/secret/l.txt')",
                 weights="C:\\Users\\Jane Doe\\w.pth", note="3 file(s) of --calibration /home/jane/secret/calib unused")
    (out / "index.json").write_text(json.dumps(index))
    site = published(capsys, {"alpha": out}, tmp_path / "w", "alpha")
    served = (site / "1.6.0" / "index.json").read_text()
    assert "secret" not in served and "Jane" not in served and "/home" not in served, served
    [entry] = json.loads(served)["models"]
    assert entry["source"] == "net.py:build(labels='l.txt')" and entry["weights"] == "w.pth"
    assert entry["note"] == "3 file(s) of --calibration calib unused"
    assert entry["remoteUrl"] == "https://models.example.org/pte/1.6.0/custom/alpha_portable.pte"
    assert "/home/Jane Doe/secret/net.py" in (out / "index.json").read_text()


def test_a_program_naming_a_folder_of_the_disk_is_refused_not_published(capsys, tmp_path):
    """A program that carries a folder of the exporting disk (as Core AI's debug conversion
    wrote the model's source paths into its payload) is refused in one line naming the file,
    the folder and the backend to leave out, before the site is touched."""
    out = tmp_path / "out"
    model = f"tiny_models:carries_text(text='{out}/stack.py')"
    code, _, err = cli(capsys, "--model", model, "--input-shape", "1,3,16,16", "--weights", "none",
                       "--backends", "portable", "--no-verify", "--out", out)
    assert code == ExitStatus.OK, err
    [program] = (out / "custom").glob("*.pte")
    assert f"{out}/stack.py".encode() in program.read_bytes()
    code, _, err = cli(capsys, *publish_args(out, tmp_path / "site"))
    assert code == ExitStatus.MANIFEST
    assert error_lines(err) == [f"error: {program} names {out}/, a folder of this machine's disk: the site would serve "
                                "that path to every app that downloads the file (fix: export it again, leaving portable "
                                "out (--backends) if its program still names it, then publish)"]
    assert not (tmp_path / "site").exists()


def test_a_site_and_an_export_never_share_a_folder(capsys, models, tmp_path):
    """Only publish writes a served site: an export into it (or below it) is refused, and so
    is a site that is the export's folder, lies in it or holds it (it would serve the export's
    reports and full paths); nothing is written either way."""
    site = published(capsys, models, tmp_path / "w", "beta")
    before = snapshot(tmp_path / "w")
    for out in (site / "1.6.0", site / "new" / "deeper", site):
        code, _, err = cli(capsys, *TINY, "--backends", "portable", "--out", out)
        assert code == ExitStatus.OUTPUT, err
        assert f"is inside the published site {site}, which only pteforge publish writes" in error_lines(err)[0]
    assert snapshot(tmp_path / "w") == before
    out = tmp_path / "alpha"
    shutil.copytree(models["alpha"], out)
    for where in (out, out / "public", tmp_path):
        code, _, err = cli(capsys, *publish_args(out, where))
        assert code == ExitStatus.USAGE and "and the export's folder" in error_lines(err)[0], (where, err)
    assert not (out / "public").exists() and not (out / "versions.json").exists()
    code, _, err = cli(capsys, *TINY, "--backends", "portable", "--out", tmp_path / "x", "--publish", tmp_path / "x",
                       "--publish-base-url", "https://models.example.org/pte")
    assert code == ExitStatus.USAGE and not (tmp_path / "x").exists(), err
