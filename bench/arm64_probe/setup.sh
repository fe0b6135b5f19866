#!/usr/bin/env bash
# Build an Arm64 (aarch64) CPython 3.11 + ExecuTorch 1.5.1 runtime that runs under qemu-user
# on an x86_64 Debian 12 host (issue #71 probe). Idempotent: re-running skips what is done.
#
#   bash bench/arm64_probe/setup.sh            # builds $DEST (default ~/.cache/pteforge-arm64-probe)
#   $DEST/run.sh bench/arm64_probe/run_pte.py M.pte in.npz out.npz   # runs it (see the end)
#
# Needs root for the apt steps (qemu-user-static install, dpkg --add-architecture arm64).
# Everything CPU-heavy runs under nice -n 19.
set -euo pipefail

DEST=${DEST:-$HOME/.cache/pteforge-arm64-probe}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PIP=${PIP:-python3 -m pip}   # `uv pip` has no `download`; `uvx pip download ...` also works
PYV=3.11
# pins: executorch/torch as pyproject.toml; the rest as uv.lock (pure Python but numpy/markupsafe)
WHEELS_PLATFORM=(executorch==1.5.1 torch==2.14.0 numpy==2.1.3 markupsafe==3.0.4)
WHEELS_PURE=(typing_extensions==4.16.0 filelock==4.2.11 sympy==1.14.0 mpmath==1.3.0
             networkx==3.4.2 jinja2==3.1.6 fsspec==2026.9.0)
DEBS=(python3.11-minimal:arm64 libpython3.11-minimal:arm64 libpython3.11-stdlib:arm64
      libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64 zlib1g:arm64 libexpat1:arm64 libffi8:arm64
      libbz2-1.0:arm64 liblzma5:arm64 libssl3:arm64 libsqlite3-0:arm64 libncursesw6:arm64
      libtinfo6:arm64 libreadline8:arm64 libuuid1:arm64 libnsl2:arm64 libtirpc3:arm64
      libdb5.3:arm64 libgdbm6:arm64 media-types)
ROOT=$DEST/root SP=$DEST/site-packages
mkdir -p "$DEST"/{debs,wheels,tools} "$ROOT" "$SP"

# 1. qemu-user-static and the arm64 package lists (host-wide, once)
if ! command -v qemu-aarch64-static >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64 && apt-get update -qq
fi

# 2. an aarch64 CPython 3.11 root from Debian's arm64 packages (dpkg-deb -x, not installed)
if [ ! -e "$DEST/.root-done" ]; then
  (cd "$DEST/debs" && apt-get download "${DEBS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  for d in "$DEST"/debs/*.deb; do dpkg-deb -x "$d" "$ROOT"; done
  touch "$DEST/.root-done"
fi
# qemu-user 7.2 passes the host's x86 /proc/cpuinfo through; torch's cpuinfo then finds no
# Arm core and segfaults at `import torch`. qemu's -L prefix also redirects opens of absolute
# paths that exist under ROOT, so an Arm cpuinfo (and MIDR, read by oneDNN's xbyak_aarch64
# and ExecuTorch's cpuinfo_utils) there is what the guest reads. Values: qemu's `-cpu max`.
NCPU=$(nproc)
mkdir -p "$ROOT/proc"; : > "$ROOT/proc/cpuinfo"
for ((i = 0; i < NCPU; i++)); do
  printf 'processor\t: %d\nBogoMIPS\t: 125.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm svebf16 i8mm bf16 dgh rng bti\nCPU implementer\t: 0x00\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0x051\nCPU revision\t: 0\n\n' "$i" >> "$ROOT/proc/cpuinfo"
  d=$ROOT/sys/devices/system/cpu/cpu$i/regs/identification
  mkdir -p "$d"; echo 0x00000000000f0510 > "$d/midr_el1"; echo 0x0 > "$d/revidr_el1"
done

# 3. aarch64 wheels from PyPI (numpy 2.1.3 is tagged manylinux_2_17 only: pip 23 needs every tag)
(cd "$DEST/wheels" &&
  nice -n 19 $PIP download -q --only-binary=:all: --no-deps --python-version $PYV \
    --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 \
    --platform manylinux2014_aarch64 -d . "${WHEELS_PLATFORM[@]}" "${WHEELS_PURE[@]}")

# 4. unzip them into one site-packages (no pip under emulation). torch's wheel is a CUDA 13
#    build (454 MB): leave out libtorch_cuda*.so (461 MB), headers, cmake files, protoc.
if [ ! -e "$DEST/.site-done" ]; then
  for w in "$DEST"/wheels/*.whl; do
    case $(basename "$w") in
      torch-*) nice -n 19 unzip -qo "$w" -d "$SP" -x 'torch/include/*' 'torch/share/*' \
                 'torch/lib/libtorch_cuda.so' 'torch/lib/libtorch_cuda_linalg.so' \
                 'torch/lib/libtorch_nvshmem.so' 'torch/lib/libcaffe2_nvrtc.so' 'torch/bin/protoc*' ;;
      *) nice -n 19 unzip -qo "$w" -d "$SP" ;;
    esac
  done
  touch "$DEST/.site-done"
fi

# 5. stand-ins for the CUDA libraries torch's libraries NEED (make_cuda_stubs.py says why),
#    linked with Debian's aarch64 binutils, extracted, not installed
if [ ! -x "$DEST/tools/x/usr/bin/aarch64-linux-gnu-ld" ]; then
  (cd "$DEST/tools" && apt-get download binutils-aarch64-linux-gnu 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  dpkg-deb -x "$DEST"/tools/binutils-aarch64-linux-gnu_*.deb "$DEST/tools/x"
fi
if [ ! -e "$SP/torch/lib/libtorch_cuda.so" ]; then
  LD_LIBRARY_PATH=$DEST/tools/x/usr/lib/x86_64-linux-gnu nice -n 19 python3 "$HERE/make_cuda_stubs.py" \
    "$SP" "$ROOT" "$DEST/tools/x/usr/bin" "$DEST/stubs"
  cp "$DEST"/stubs/lib*.so* "$SP/torch/lib/"
fi

# 6. byte-compile on the host (same 3.11 magic): `import torch` under emulation 27 s -> 9 s.
#    (Debian's stdlib package ships no .pyc; PYTHONDONTWRITEBYTECODE=1 here stops the guest
#    writing them.) A few test files of torch don't compile: ignored.
nice -n 19 python3.11 -m compileall -q -j 2 "$SP" "$ROOT/usr/lib/python3.11" >/dev/null 2>&1 || true

# 7. the launcher. -cpu max,sme=off: plain `max` has SME, and XNNPACK's SME kernels give
#    wrong int8 results (mobilenet_v3_small int8: SQNR -0.2 dB vs the host) and a 14x slower
#    fp32 under qemu 7.2; with sme=off SVE2, fp16 arithmetic, dot product and i8mm stay.
cat > "$DEST/run.sh" <<EOF
#!/bin/sh
# run an aarch64 python3.11 with ExecuTorch 1.5.1 under qemu-user (bench/arm64_probe/setup.sh)
exec env PYTHONPATH="$SP" qemu-aarch64-static -cpu "\${QEMU_CPU:-max,sme=off}" -L "$ROOT" "$ROOT/usr/bin/python3.11" "\$@"
EOF
chmod +x "$DEST/run.sh"

# 8. smoke test: torch imports, ExecuTorch's pybindings load, XNNPACK is registered
nice -n 19 "$DEST/run.sh" -c '
import sys; sys.path.insert(0, "'"$HERE"'"); import run_pte, platform
sys.meta_path.insert(0, run_pte._CpuOnlyTorch())
import torch
from executorch.extension.pybindings import _C
print(platform.machine(), "torch", torch.__version__, "backends", list(_C._get_registered_backend_names()))' \
  2> >(grep -v cpuinfo_utils >&2)
du -sh "$DEST"/{wheels,debs,root,site-packages}
