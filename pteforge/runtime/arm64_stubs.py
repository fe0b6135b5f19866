"""Stand-ins for the CUDA libraries PyPI's aarch64 torch links to (``pteforge setup arm64``).

PyPI's aarch64 torch wheel is a CUDA 13 build: libtorch_cpu.so, libtorch_python.so and
libc10_cuda.so NEED libcudart.so.13, libcupti.so.13, libcudnn.so.9, libnccl.so.2,
libcufile.so.0 and libtorch_cuda.so (461 MB, itself needing cuBLAS, cuFFT...). ExecuTorch's
pybindings NEED libtorch*.so, so torch must load, but nothing on the CPU path calls CUDA.
Instead of ~2 GB of NVIDIA wheels the loader gets stand-ins: one assembly file defining
every symbol the kept libraries reference and nothing kept defines (functions return the
address of a zeroed scratch block; data is zeroed; a typeinfo gets its name), linked once
per soname with every symbol in one version node named as the soname (the references are
versioned so: ``cudaFree@libcudart.so.13``). Calling into CUDA still cannot work: the guest
(``arm64_guest.py``) makes torch look like a CPU build. A CPU-only aarch64 torch wheel on
PyPI would make all of this unnecessary.
"""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path


def _dynsyms(readelf: list[str], path: str, env: dict):
    out = subprocess.run([*readelf, "-W", "--dyn-syms", path], capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(":").isdigit():
            continue
        _, _, _, typ, bind, _, ndx, name = f[:8]
        yield typ, bind, ndx, name.split("@")[0]


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def wanted_symbols(site: Path, root: Path, readelf: list[str], stubs: list[str], env: dict) -> dict[str, str]:
    """The symbols the kept libraries reference that nothing kept defines: {name: type}."""
    users = [p for p in glob.glob(f"{site}/torch/lib/*.so*") + glob.glob(f"{site}/torch/*.so")
             + glob.glob(f"{site}/functorch/*.so") + glob.glob(f"{site}/executorch/lib/*.so")
             + glob.glob(f"{site}/executorch/extension/pybindings/*.so")
             if os.path.basename(p) not in stubs and _is_elf(p)]
    providers = users + [p for d in ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu")
                         for p in glob.glob(f"{root}/{d}/*.so*") if _is_elf(p)] + [f"{root}/usr/bin/python3.11"]
    defined = {n for p in providers for _, _, ndx, n in _dynsyms(readelf, p, env) if ndx != "UND" and n}
    wanted: dict[str, str] = {}
    for p in users:
        for typ, bind, ndx, n in _dynsyms(readelf, p, env):
            if ndx == "UND" and n and bind == "GLOBAL" and n not in defined:
                wanted[n] = typ if wanted.get(n, typ) == typ else "OBJECT"
    return wanted


def assembly(wanted: dict[str, str]) -> str:
    """One aarch64 assembly file defining every wanted symbol."""
    asm = ["\t.text", "\t.p2align 4"]
    for n in sorted(n for n, t in wanted.items() if t in ("FUNC", "NOTYPE")):
        asm += [f"\t.globl {n}", f"\t.type {n}, %function", f"{n}:"]
    # x0 = a zeroed scratch block: a getter returning a reference gets writable memory; a CUDA
    # API call gets a non-zero (error) code
    asm += ["\tadrp x0, stub_scratch", "\tadd x0, x0, :lo12:stub_scratch", "\tret",
            "\t.bss", "\t.p2align 12", "stub_scratch:", "\t.zero 65536", "\t.data", "\t.p2align 4"]
    for n in sorted(n for n, t in wanted.items() if t == "OBJECT"):
        asm += [f"\t.globl {n}", f"\t.type {n}, %object", f"\t.size {n}, 64", f"{n}:"]
        if n.startswith("_ZTI"):  # a std::type_info pybind11 can hash (libtorch_python registers NCCL classes)
            asm += ["\t.quad _ZTVN10__cxxabiv117__class_type_infoE+16", f"\t.quad {n}_name",
                    "\t.zero 48", f"{n}_name:", f'\t.asciz "{n[4:]}"', "\t.p2align 4"]
        else:
            asm += ["\t.zero 64"]
    tls = sorted(n for n, t in wanted.items() if t == "TLS")
    if tls:
        asm += ["\t.section .tbss,\"awT\",%nobits"]
        for n in tls:
            asm += [f"\t.globl {n}", f"\t.type {n}, %tls_object", f"\t.size {n}, 64", f"{n}:", "\t.zero 64"]
    return "\n".join(asm) + "\n"


def write_stubs(site: Path, root: Path, binutils: Path, out: Path, stubs: list[str], env: dict) -> int:
    """Link one stand-in per soname in ``stubs`` into ``out`` (Debian's aarch64 binutils in
    ``binutils``); returns how many symbols they define."""
    readelf = [str(binutils / "aarch64-linux-gnu-readelf")]
    wanted = wanted_symbols(site, root, readelf, stubs, env)
    out.mkdir(parents=True, exist_ok=True)
    (out / "stub.s").write_text(assembly(wanted))
    subprocess.run([str(binutils / "aarch64-linux-gnu-as"), "-o", str(out / "stub.o"), str(out / "stub.s")],
                   check=True, env=env, capture_output=True)
    for name in stubs:
        # one version node named as the soname, as NVIDIA's libraries define it: glibc asserts
        # when a reference versioned "libcudart.so.13" meets a library with no version information
        (out / f"{name}.map").write_text(f"{name} {{ global: *; }};\n")
        subprocess.run([str(binutils / "aarch64-linux-gnu-ld"), "-shared", "-soname", name, "--version-script",
                        str(out / f"{name}.map"), "-o", str(out / name), str(out / "stub.o"),
                        f"-rpath-link={root}/lib/aarch64-linux-gnu",  # the typeinfos point at libstdc++'s vtable
                        f"{root}/usr/lib/aarch64-linux-gnu/libstdc++.so.6"], check=True, env=env, capture_output=True)
    return len(wanted)
