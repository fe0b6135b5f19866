from __future__ import annotations

import shutil
import subprocess

from ..core.spec import Precision
from .base import Backend, Check, Docs

_FIX = "export on a Linux or Windows machine with an NVIDIA GPU and its driver (nvidia-smi lists it)"


class Cuda(Backend):
    name = "cuda"
    ray_resource = "cuda"
    order = 48
    priority = {"desktop": 0}
    title = "CUDA (NVIDIA GPU)"
    runtime_name = "CudaBackend"
    platforms = ("linux", "windows")
    lowers_not_on = {"macos": "CUDA lowering compiles with AOTInductor for an NVIDIA GPU, which Macs do not have"}
    hardware = "GPU"
    use_case = "NVIDIA GPUs on Linux and Windows desktops"
    description = "NVIDIA GPU (CUDA)"
    precisions = (Precision.FP32,)
    default_precision = Precision.FP32
    docs = Docs(
        overview=(
            "The CUDA backend compiles the graph ahead of time with AOTInductor into CUDA kernels for an NVIDIA GPU; "
            "the .pte carries the compiled shared object."
        ),
        features=("fp32 compute on the GPU.",),
        target_requirements=("An NVIDIA GPU with its driver, Linux or Windows; ExecuTorch built with the CUDA backend.",),
        development_requirements=(
            "An NVIDIA GPU on the exporting machine: AOTInductor compiles and autotunes there (`nvidia-smi` must list it).",
            "Lowering takes minutes: ExecuTorch has Inductor autotune every matrix product and convolution with "
            "Triton on the GPU (MobileNet V3 small: over 6 minutes of it on an H200). It cannot be turned off: with "
            "ExecuTorch 1.5.1's `max_autotune` compile spec off, Inductor has no choice left for a convolution "
            "(NoValidChoicesError).",
            "bench/cuda_check.py lowers MobileNet V3 small, runs it on the GPU and compares it with eager on the same GPU.",
        ),
        cmake_targets=("aoti_cuda_backend",),
        build_flags=("-DEXECUTORCH_BUILD_CUDA=ON",),
        prebuilt="Not in the pip wheel's runtime (Linux, macOS, Windows): build ExecuTorch with CUDA.",
        links=("https://docs.pytorch.org/executorch/stable/backends-cuda.html",),
    )
    code_sample = """from executorch.backends.cuda.cuda_backend import CudaBackend
from executorch.backends.cuda.cuda_partitioner import CudaPartitioner
partitioner = [CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])]"""

    def lower_check(self) -> Check:
        gpu = nvidia_gpu()
        if gpu is None:
            return Check(False, "CUDA lowering needs an NVIDIA GPU, and this machine has none (no nvidia-smi)", _FIX)
        return Check(True, f"NVIDIA GPU: {gpu}")

    def partitioners(self, precision):
        from executorch.backends.cuda.cuda_backend import CudaBackend
        from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

        return [CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])]


def nvidia_gpu() -> str | None:
    """The first GPU ``nvidia-smi -L`` lists; None without one (no torch import: ``backends`` stays fast)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return listed.splitlines()[0] if listed.startswith("GPU") else None
