from __future__ import annotations

from ..spec import Precision
from .base import Backend, Docs


class Xnnpack(Backend):
    name = "xnnpack"
    title = "XNNPACK"
    runtime_name = "XnnpackBackend"
    platforms = ("android", "ios", "macos", "linux", "windows", "web")
    hardware = "CPU"
    use_case = "General-purpose CPU, the fallback that works everywhere"
    description = "CPU-optimized (XNNPACK)"
    precisions = (Precision.FP32, Precision.FP16, Precision.INT8, Precision.INT8_DYNAMIC)
    default_precision = Precision.FP32
    docs = Docs(
        overview=(
            "The XNNPACK delegate is ExecuTorch's CPU backend for mobile and desktop: "
            "optimised kernels for Arm and x86 CPUs from Google's XNNPACK library."
        ),
        features=(
            "Wide operator support on Arm and x86 CPUs, on any modern phone.",
            "fp32 and fp16 activations; 8-bit static and dynamic quantization.",
        ),
        target_requirements=(
            "ARM64 on Android, iOS, macOS, Linux and Windows; ARMv7 with NEON on Android.",
            "x86 and x86-64 (up to AVX512) on Windows, Linux and Android; WebAssembly SIMD.",
        ),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("xnnpack_backend",),
        build_flags=("-DEXECUTORCH_BUILD_XNNPACK=ON",),
        prebuilt="Included in the prebuilt Android AAR, the iOS frameworks and the pip wheel.",
        links=("https://github.com/google/XNNPACK",),
    )
    code_sample = """from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
partitioner = [XnnpackPartitioner()]"""

    def partitioners(self, precision):
        from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        if precision is Precision.INT8_DYNAMIC:
            return [
                XnnpackPartitioner(config_precisions=ConfigPrecisionType.DYNAMIC_QUANT),
                XnnpackPartitioner(),
            ]
        return [XnnpackPartitioner()]

    def quantizer(self, precision):
        if not precision.quantized:
            return None
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )

        quantizer = XNNPACKQuantizer()
        quantizer.set_global(
            get_symmetric_quantization_config(
                is_per_channel=True, is_dynamic=precision is Precision.INT8_DYNAMIC
            )
        )
        return quantizer
