"""``pteforge setup arm64``: build the Arm64 runtime of ``runtime/arm64.py`` in pteforge's cache.

From Debian's archive (``apt-get download``, unpacked with ``dpkg-deb -x``, nothing
installed): qemu-user-static, an arm64 CPython 3.11 and its libraries, and the cross
binutils that link the CUDA stand-ins below. From the Python registry (``pip download
--platform manylinux_2_28_aarch64``): the aarch64 wheels of executorch and torch at this
host's versions, numpy and torch's pure-Python dependencies, unzipped into one folder.

Each step is skipped when what it makes is there, so running it again costs seconds and a
cache restored in CI downloads nothing. The one step that needs root, once per machine, is
``dpkg --add-architecture arm64`` (Debian's arm64 package lists); it is run with sudo where
that asks for no password. Measured ground and why each odd step exists: docs/arm64.md.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from filelock import FileLock

from ..core.errors import SetupError
from .arm64 import QEMU_CPU, SETUP, Layout, command, home, native
from .arm64_stubs import write_stubs

PYTHON = "3.11"  # Debian 12's CPython: the guest's
DEBS = ["python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libstdc++6", "libgcc-s1",
        "libgomp1", "zlib1g", "libexpat1", "libffi8", "libbz2-1.0", "liblzma5", "libssl3", "libsqlite3-0",
        "libncursesw6", "libtinfo6", "libreadline8", "libuuid1", "libnsl2", "libtirpc3", "libdb5.3", "libgdbm6"]
TOOLS = ["qemu-user-static", "binutils-aarch64-linux-gnu"]  # this host's, unpacked beside the root
# executorch and torch at this host's versions (the same runtime, the same programs); the rest as this host has them
WHEELS = ["executorch", "torch", "numpy", "markupsafe", "typing_extensions", "filelock", "sympy", "mpmath", "networkx",
          "jinja2", "fsspec"]
# torch's aarch64 wheel is a CUDA build: its CUDA libraries (461 MB), headers and tools are left out
TORCH_LEFT_OUT = ["torch/include/*", "torch/share/*", "torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda_linalg.so",
                  "torch/lib/libtorch_nvshmem.so", "torch/lib/libcaffe2_nvrtc.so", "torch/bin/protoc*"]
STUBS = ["libcudart.so.13", "libcupti.so.13", "libcudnn.so.9", "libnccl.so.2", "libcufile.so.0", "libtorch_cuda.so",
         "libnvshmem_host.so.3"]


def setup(say=print, layout: Layout | None = None) -> dict:
    """Every step, each skipped when done; returns what the last one checked (``ready.json``)."""
    layout = layout or Layout(home())
    if native():
        raise SetupError("this host is Arm64 itself: its own ExecuTorch runtime already proves Arm64 programs",
                         fix="nothing to set up; export as usual")
    if sys.platform != "linux" or not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise SetupError(f"pteforge setup arm64 needs a Debian-based Linux x86_64 host (apt-get, dpkg-deb); this is "
                         f"{sys.platform}", fix="on Windows run it in WSL with Debian 12; see docs/install.md")
    layout.home.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{layout.home}.lock"):  # a second setup (CI's early one, a test's) waits, then finds it done
        return _set_up(layout, say)


def _set_up(layout: Layout, say) -> dict:
    from .arm64 import facts

    done = facts(layout)
    if done is not None and done.get("pins") == _pins() + DEBS:
        say(f"Arm64 runtime already set up in {layout.home} ({done.get('created')}); delete it to set it up again")
        return done
    layout.home.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    _arm64_lists(say)
    _debs(layout, say)
    _cpuinfo(layout.root)
    _wheels(layout, say)
    _site(layout, say)
    _stubs(layout, say)
    _compile(layout, say)
    found = _check(layout, say)
    say(f"Arm64 runtime ready in {layout.home} ({time.monotonic() - t0:.0f} s)")
    return found


def _run(cmd: list[str], what: str, fix: str, cwd: Path | None = None, env: dict | None = None) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    except OSError as exc:
        raise SetupError(f"{what}: {exc}", fix=fix) from None
    if done.returncode != 0:
        lines = [t for t in (done.stderr or done.stdout).strip().splitlines() if not t.startswith("W:")]
        raise SetupError(f"{what}: {lines[-1] if lines else f'exit code {done.returncode}'}", fix=fix)
    return done.stdout


def _as_root(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return cmd
    if shutil.which("sudo"):
        return ["sudo", "-n", *cmd]
    raise SetupError("adding Debian's arm64 package lists needs root",
                     fix="run once as root: dpkg --add-architecture arm64 && apt-get update")


def _arm64_lists(say) -> None:
    """Debian's arm64 package lists, so that ``apt-get download NAME:arm64`` finds them."""
    foreign = _run(["dpkg", "--print-foreign-architectures"], "reading dpkg's architectures", "check dpkg works")
    if "arm64" in foreign.split():
        return
    say("adding Debian's arm64 package lists (dpkg --add-architecture arm64; apt-get update)")
    fix = "run once as root: dpkg --add-architecture arm64 && apt-get update"
    _run(_as_root(["dpkg", "--add-architecture", "arm64"]), "dpkg --add-architecture arm64", fix)
    _run(_as_root(["apt-get", "update", "-qq"]), "apt-get update", fix)


def _debs(layout: Layout, say) -> None:
    """Download what is missing of Debian's packages; unpack them (the root, qemu, binutils)."""
    debs = layout.home / "debs"
    debs.mkdir(exist_ok=True)
    wanted = [(f"{n}:arm64", n, "arm64", layout.root) for n in DEBS] + [(n, n, "amd64", layout.home / "qemu")
                                                                         for n in TOOLS]
    missing = [spec for spec, name, arch, _ in wanted if not list(debs.glob(f"{name}_*_{arch}.deb"))]
    if missing:
        say(f"downloading {len(missing)} Debian packages (apt-get download)")
        fix = ("check that Debian's archive is reachable (apt-get update) and that this is Debian 12 (bookworm), "
               "whose package names these are")
        try:
            _run(["apt-get", "download", *missing], "apt-get download", fix, cwd=debs)
        except SetupError:  # package lists older than the archive: update them once, then again
            _run(_as_root(["apt-get", "update", "-qq"]), "apt-get update", fix)
            _run(["apt-get", "download", *missing], "apt-get download", fix, cwd=debs)
    marker = layout.home / ".debs-unpacked"
    names = sorted(p.name for p in debs.glob("*.deb"))
    if marker.is_file() and marker.read_text() == "\n".join(names):
        return
    for _, name, arch, where in wanted:
        deb = sorted(debs.glob(f"{name}_*_{arch}.deb"))[-1]
        _run(["dpkg-deb", "-x", str(deb), str(where)], f"unpacking {deb.name}", "delete it and run the setup again")
    marker.write_text("\n".join(names))


def _cpuinfo(root: Path) -> None:
    """An Arm /proc/cpuinfo (and MIDR registers) under the root: qemu 7.2 passes the host's x86
    one through, and torch's cpuinfo crashes at ``import torch`` on it. qemu's -L redirects
    opens of paths that exist under the root, so these are what the guest reads."""
    flags = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
             "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes "
             "svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 i8mm bf16 dgh rng bti")
    cpus = os.cpu_count() or 1
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/cpuinfo").write_text("".join(
        f"processor\t: {i}\nBogoMIPS\t: 125.00\nFeatures\t: {flags}\nCPU implementer\t: 0x00\n"
        f"CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0x051\nCPU revision\t: 0\n\n" for i in range(cpus)))
    for i in range(cpus):
        ident = root / f"sys/devices/system/cpu/cpu{i}/regs/identification"
        ident.mkdir(parents=True, exist_ok=True)
        (ident / "midr_el1").write_text("0x00000000000f0510\n")
        (ident / "revidr_el1").write_text("0x0\n")


def _pins() -> list[str]:
    pins = []
    for name in WHEELS:
        try:
            pins.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            pins.append(name)
    return pins


def _pip() -> list[str]:
    """A pip that can download: this Python's, else uv's (``uvx pip``), else python3's."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    if shutil.which("uvx"):
        return ["uvx", "pip"]
    return ["python3", "-m", "pip"]


def _wheels(layout: Layout, say) -> None:
    """The aarch64 wheels, from the Python registry (pip skips the files already there)."""
    wheels = layout.home / "wheels"
    wheels.mkdir(exist_ok=True)
    pins = _pins()
    have = {p.name.split("-")[0].lower().replace("_", "-") + "==" + p.name.split("-")[1] for p in wheels.glob("*.whl")}
    if all(pin.lower().replace("_", "-") in have for pin in pins):
        return
    say(f"downloading the aarch64 wheels of {', '.join(pins[:3])} and {len(pins) - 3} more (~470 MB, torch most of it)")
    _run(["nice", "-n", "19", *_pip(), "download", "-q", "--only-binary=:all:", "--no-deps", "--python-version", PYTHON,
          "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux_2_17_aarch64", "--platform",
          "manylinux2014_aarch64", "-d", str(wheels), *pins], "pip download (aarch64 wheels)",
         "check that the Python registry (PyPI) is reachable, or set PIP_INDEX_URL to a mirror")


def _site(layout: Layout, say) -> None:
    """Unzip every wheel into one site-packages (there is no pip under emulation)."""
    marker = layout.home / ".site-unzipped"
    names = "\n".join(sorted(p.name for p in (layout.home / "wheels").glob("*.whl")) + TORCH_LEFT_OUT)
    if marker.is_file() and marker.read_text() == names:
        return
    say("unzipping the wheels")
    if layout.site.exists():
        shutil.rmtree(layout.site)
    (layout.home / ".compiled").unlink(missing_ok=True)
    for wheel in sorted((layout.home / "wheels").glob("*.whl")):
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if not any(fnmatch.fnmatch(m, p) for p in TORCH_LEFT_OUT)]
            zf.extractall(layout.site, members)
    marker.write_text(names)


def _compile(layout: Layout, say) -> None:
    """Byte-code compiled by a host CPython 3.11 (the same magic): the guest's ``import torch``
    takes 9 s instead of 27 s. Without one, the guest compiles it once, under emulation."""
    marker = layout.home / ".compiled"
    if marker.is_file():
        return
    say("byte-compiling the Arm64 runtime's Python files")
    host = sys.executable if sys.version_info[:2] == (3, 11) else shutil.which(f"python{PYTHON}")
    dirs = [str(layout.site), str(layout.root / f"usr/lib/python{PYTHON}")]
    if host:
        subprocess.run(["nice", "-n", "19", host, "-m", "compileall", "-q", "-j", "0", *dirs], capture_output=True)
    else:
        cmd, env = command(layout, [])
        cmd[-1:] = ["-m", "compileall", "-q", *dirs]  # the emulated python itself, not the guest script
        subprocess.run(["nice", "-n", "19", *cmd], env=env, capture_output=True)
    marker.write_text("")  # a few of torch's test files do not compile: not needed


def _check(layout: Layout, say) -> dict:
    """Start the runtime under emulation: torch imports, XNNPACK is registered; what it is."""
    say("checking the runtime under emulation (import torch, ExecuTorch's backends)")
    cmd, env = command(layout, ["--check"])
    out = _run(["nice", "-n", "10", *cmd], "starting the Arm64 runtime under emulation",
               f"delete {layout.home} and run `{SETUP}` again", env=env)
    found = json.loads(out.strip().splitlines()[-1])
    if found.get("machine") != "aarch64" or "XnnpackBackend" not in found.get("backends", []):
        raise SetupError(f"the emulated runtime is {found.get('machine')} with backends {found.get('backends')}",
                         fix=f"delete {layout.home} and run `{SETUP}` again")
    version = _run([str(layout.qemu), "--version"], "qemu-aarch64-static --version", "run the setup again")
    found.update(qemu=version.splitlines()[0].split(" (")[0].replace("version ", ""), cpu=QEMU_CPU,
                 created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), pins=_pins() + DEBS)
    layout.ready.write_text(json.dumps(found, indent=2) + "\n")
    return found


def _stubs(layout: Layout, say) -> None:
    """Stand-ins for the CUDA libraries torch's aarch64 libraries NEED (see :mod:`.arm64_stubs`)."""
    lib = layout.site / "torch/lib"
    if (lib / STUBS[0]).is_file():
        return
    say("linking stand-ins for the CUDA libraries torch's aarch64 wheel links to")
    tools = layout.home / "qemu/usr"
    env = {**os.environ, "LD_LIBRARY_PATH": str(tools / "lib/x86_64-linux-gnu")}
    out = layout.home / "stubs"
    try:
        write_stubs(layout.site, layout.root, tools / "bin", out, STUBS, env)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SetupError(f"linking the CUDA stand-ins: {exc}", fix=f"delete {layout.home} and run `{SETUP}` again") \
            from None
    for name in STUBS:
        shutil.copy(out / name, lib / name)
