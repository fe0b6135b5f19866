from __future__ import annotations

from importlib import metadata

from .base import Backend, Check, Docs

NEEDS = "ExecuTorch 1.6 and torch-tensorrt >= 2.15"


class TensorRT(Backend):
    name = "tensorrt"
    order = 49
    title = "TensorRT (NVIDIA GPU, beta)"
    platforms = ("linux", "windows")
    lowers_not_on = {os: f"TensorRT needs {NEEDS}, not on the registry yet" for os in ("linux", "macos", "windows")}
    hardware = "GPU"
    use_case = "NVIDIA GPUs through TensorRT engines (ExecuTorch 1.6, beta)"
    description = "NVIDIA GPU (TensorRT)"
    docs = Docs(
        overview=(
            "ExecuTorch 1.6 adds TensorRT as a beta backend through Torch-TensorRT 2.15 or newer. pteforge pins "
            "ExecuTorch 1.5.1, the newest on the registry, and the registry's torch-tensorrt is 2.14.0: this row "
            "says so until both are there. Nothing is exported for it."
        ),
        features=("TensorRT engines for NVIDIA GPUs (upstream, ExecuTorch 1.6).",),
        target_requirements=("An NVIDIA GPU with TensorRT, Linux or Windows.",),
        development_requirements=(f"{NEEDS}, and an NVIDIA GPU.",),
        prebuilt="Not in any ExecuTorch 1.5 package.",
        links=("https://github.com/pytorch/TensorRT",),
    )
    code_sample = """# ExecuTorch 1.6 and torch-tensorrt >= 2.15 (not on the registry yet)
from torch_tensorrt.executorch import TensorRTPartitioner  # upstream's beta API
partitioner = [TensorRTPartitioner()]"""

    def lower_check(self) -> Check:
        et = _version("executorch")
        trt = _version("torch-tensorrt")
        have = f"executorch {et or 'not installed'}, torch-tensorrt {trt or 'not installed'}"
        return Check(False, f"TensorRT needs {NEEDS} ({have})",
                     "wait for ExecuTorch 1.6 on the registry: pteforge pins 1.5.1 until then")

    def run_check(self, host) -> Check:
        return Check(False, f"TensorRT programs need {NEEDS}", "wait for ExecuTorch 1.6 on the registry")

    def partitioners(self, precision):
        raise NotImplementedError(f"TensorRT needs {NEEDS}")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
