from __future__ import annotations

import os
import shutil

from ..core.spec import Precision
from ._arm import TOSA_TOOLS, ArmBackend
from .base import Check, Docs

_CONVERTERS = ("model-converter", "model_converter")
_MIN_GLIBC = (2, 38)


class Vgf(ArmBackend):
    name = "vgf"
    simulated_on = None  # its payload is a VGF file for Vulkan ML extensions: no reference simulator here
    order = 140
    title = "Arm VGF (ML extensions for Vulkan)"
    aliases = ("arm-vgf",)
    runtime_name = "VgfBackend"
    platforms = ("android", "linux")
    hardware = "GPU/NPU"
    use_case = "Arm GPUs and NPUs through the ML extensions for Vulkan"
    description = "Arm ML extensions for Vulkan (VGF)"
    precisions = (Precision.FP32, Precision.INT8)
    recipe_names = {Precision.INT8: "VGF_INT8", Precision.FP32: "VGF_FP"}
    default_precision = Precision.FP32
    requires = (TOSA_TOOLS,)
    docs = Docs(
        overview=(
            "Lowers TOSA graphs to VGF files for Arm's ML extensions for Vulkan, executed "
            "by Vulkan data-graph pipelines on Arm GPUs and NPUs."
        ),
        features=("TOSA-1.0+FP and TOSA-1.0+INT profiles.",),
        target_requirements=("A Vulkan driver with VK_ARM_data_graph (or Arm's ML emulation layer).",),
        development_requirements=(
            "Arm's model converter (`model-converter` on PATH, pip ai-ml-sdk-model-converter), "
            "which needs glibc >= 2.38.",
        ),
        cmake_targets=("vgf_backend",),
        build_flags=("-DEXECUTORCH_BUILD_VGF=ON",),
        prebuilt="Not prebuilt: build ExecuTorch with the VGF backend from source.",
    )
    code_sample = """from executorch.backends.arm.vgf import VgfCompileSpec, VgfPartitioner
partitioner = [VgfPartitioner(VgfCompileSpec("TOSA-1.0+FP"))]"""

    def lower_check(self) -> Check:
        base = super().lower_check()
        if not base.ok:
            return base
        glibc = _glibc()
        if glibc and glibc < _MIN_GLIBC:
            have = ".".join(map(str, glibc))
            return Check(
                False,
                f"the VGF model converter needs glibc >= 2.38 (this machine has {have})",
                "export VGF on a newer Linux (e.g. Ubuntu 24.04)",
            )
        if not any(shutil.which(c) for c in _CONVERTERS):
            return Check(
                False,
                "Arm's model converter (model-converter) is not on PATH",
                "uv pip install ai-ml-sdk-model-converter (needs glibc >= 2.38)",
            )
        return Check(True, "model converter found")

    def compile_spec(self, precision):
        from executorch.backends.arm.vgf import VgfCompileSpec

        return VgfCompileSpec("TOSA-1.0+INT" if precision is Precision.INT8 else "TOSA-1.0+FP")

    def partitioner_for(self, spec):
        from executorch.backends.arm.vgf import VgfPartitioner

        return VgfPartitioner(spec)


def _glibc() -> tuple[int, ...] | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        return None
    try:
        return tuple(int(x) for x in text.split()[-1].split(".")[:2])
    except (ValueError, IndexError):
        return None
