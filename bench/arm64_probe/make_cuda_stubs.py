"""Write aarch64 stub libraries for the CUDA libraries the PyPI aarch64 torch wheel links to.

PyPI's torch==2.14.0 manylinux_2_28_aarch64 wheel is a CUDA 13 build: libtorch_cpu.so,
libtorch_python.so and libc10_cuda.so have DT_NEEDED on libcudart.so.13, libcupti.so.13,
libcudnn.so.9, libnccl.so.2, libcufile.so.0 and libtorch_cuda.so (461 MB, itself needing
cuBLAS, cuFFT...). ExecuTorch's pybindings (_C.so) NEED libtorch*.so, so torch must load,
but nothing on the CPU path calls into CUDA. Instead of ~2 GB of NVIDIA wheels we give the
loader stand-ins: one assembly file that defines every symbol the kept libraries reference
and nothing kept defines (functions return the address of a zeroed scratch block; data is
zeroed, a typeinfo gets its name), linked once per needed soname, every symbol in one
version node named as the soname (the references are versioned so: cudaFree@libcudart.so.13).
Calling into CUDA still cannot work: run_pte.py hides torch's CUDA/c10d entry points.

usage: make_cuda_stubs.py SITE_PACKAGES ARM64_ROOT BINUTILS_BIN OUTDIR
(host readelf reads aarch64 ELF; aarch64-linux-gnu-as/-ld come from Debian's
binutils-aarch64-linux-gnu, extracted with dpkg-deb, not installed)
"""

import glob
import os
import subprocess
import sys

STUBS = ["libcudart.so.13", "libcupti.so.13", "libcudnn.so.9", "libnccl.so.2",
         "libcufile.so.0", "libtorch_cuda.so", "libnvshmem_host.so.3"]


def dynsyms(path):
    out = subprocess.run(["readelf", "-W", "--dyn-syms", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) < 8 or not f[0].rstrip(":").isdigit():
            continue
        _, _, _, typ, bind, _, ndx, name = f[:8]
        yield typ, bind, ndx, name.split("@")[0]


def is_elf(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def main(sp, root, binutils, outdir):
    stubnames = set(STUBS)
    users = [p for p in glob.glob(f"{sp}/torch/lib/*.so*") + glob.glob(f"{sp}/torch/*.so")
             + glob.glob(f"{sp}/functorch/*.so") + glob.glob(f"{sp}/executorch/lib/*.so")
             + glob.glob(f"{sp}/executorch/extension/pybindings/*.so")
             if os.path.basename(p) not in stubnames and is_elf(p)]
    providers = users + [p for d in ("lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu")
                         for p in glob.glob(f"{root}/{d}/*.so*") if is_elf(p)]
    providers.append(f"{root}/usr/bin/python3.11")
    defined = {n for p in providers for _, _, ndx, n in dynsyms(p) if ndx != "UND" and n}
    wanted = {}
    for p in users:
        for typ, bind, ndx, n in dynsyms(p):
            if ndx == "UND" and n and bind == "GLOBAL" and n not in defined:
                wanted[n] = typ if wanted.get(n, typ) == typ else "OBJECT"
    tls = sorted(n for n, t in wanted.items() if t == "TLS")
    asm = ["\t.text", "\t.p2align 4"]
    for n in sorted(n for n, t in wanted.items() if t in ("FUNC", "NOTYPE")):
        asm += [f"\t.globl {n}", f"\t.type {n}, %function", f"{n}:"]
    # x0 = a zeroed scratch block: a getter returning a reference (c10d::get_gil_checker(),
    # assigned by libtorch_python's static initializers) gets writable memory; a CUDA API
    # call gets a non-zero (error) code
    asm += ["\tadrp x0, stub_scratch", "\tadd x0, x0, :lo12:stub_scratch", "\tret",
            "\t.bss", "\t.p2align 12", "stub_scratch:", "\t.zero 65536",
            "\t.data", "\t.p2align 4"]
    for n in sorted(n for n, t in wanted.items() if t == "OBJECT"):
        asm += [f"\t.globl {n}", f"\t.type {n}, %object", f"\t.size {n}, 64", f"{n}:"]
        if n.startswith("_ZTI"):
            # a std::type_info pybind11 can hash: libtorch_python registers py::class_<
            # c10d::ProcessGroupNCCL> etc. at import, keyed by typeid(...).name()
            asm += ["\t.quad _ZTVN10__cxxabiv117__class_type_infoE+16", f"\t.quad {n}_name",
                    "\t.zero 48", f"{n}_name:", f'\t.asciz "{n[4:]}"', "\t.p2align 4"]
        else:
            asm += ["\t.zero 64"]
    if tls:
        asm += ["\t.section .tbss,\"awT\",%nobits"]
        for n in tls:
            asm += [f"\t.globl {n}", f"\t.type {n}, %tls_object", f"\t.size {n}, 64", f"{n}:", "\t.zero 64"]
    os.makedirs(outdir, exist_ok=True)
    src, obj = f"{outdir}/stub.s", f"{outdir}/stub.o"
    with open(src, "w") as fh:
        fh.write("\n".join(asm) + "\n")
    subprocess.run([f"{binutils}/aarch64-linux-gnu-as", "-o", obj, src], check=True)
    for name in STUBS:
        # one version node named as the soname, as NVIDIA's libraries define it: glibc
        # asserts (dl-lookup.c check_match) when a reference versioned "libcudart.so.13"
        # meets a libcudart.so.13 that has no version information
        vs = f"{outdir}/{name}.map"
        with open(vs, "w") as fh:
            fh.write(f"{name} {{ global: *; }};\n")
        subprocess.run([f"{binutils}/aarch64-linux-gnu-ld", "-shared", "-soname", name,
                        "--version-script", vs, "-o", f"{outdir}/{name}", obj,
                        # the typeinfos point at libstdc++'s class_type_info vtable, and
                        # libtorch_global_deps.so loads libcudart.so.13 before libstdc++
                        f"-rpath-link={root}/lib/aarch64-linux-gnu",
                        f"{root}/usr/lib/aarch64-linux-gnu/libstdc++.so.6"], check=True)
    counts = {t: sum(1 for v in wanted.values() if v == t) for t in set(wanted.values())}
    print(f"stubbed {len(wanted)} symbols {counts} into {len(STUBS)} libraries")


if __name__ == "__main__":
    main(*sys.argv[1:5])
