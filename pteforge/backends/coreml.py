from __future__ import annotations

from ..spec import Precision
from .base import Backend, Docs, Requirement


class CoreML(Backend):
    name = "coreml"
    title = "Core ML"
    runtime_name = "CoreMLBackend"
    platforms = ("ios", "macos")
    hardware = "NPU/GPU/CPU"
    use_case = "Apple devices: Neural Engine, best performance and battery life"
    description = "Apple Neural Engine (CoreML)"
    precisions = (Precision.FP16, Precision.FP32)
    default_precision = Precision.FP16  # ExecuTorch's default compute precision
    requires = (Requirement("coremltools", "uv pip install 'coremltools>=9' (it comes with executorch)"),)
    docs = Docs(
        overview=(
            "The Core ML delegate hands the graph to Apple's Core ML, which schedules it "
            "on the Neural Engine, the GPU or the CPU."
        ),
        features=("fp16 (default) and fp32 compute.", "Neural Engine, GPU and CPU compute units."),
        target_requirements=("iOS 15+ / macOS 12+ (minimum deployment target iOS15 here).",),
        development_requirements=("coremltools>=9 (installed with executorch); lowers on Linux and macOS.",),
        cmake_targets=("coremldelegate",),
        build_flags=("-DEXECUTORCH_BUILD_COREML=ON",),
        prebuilt="Included in the iOS/macOS Swift packages (backend_coreml).",
        links=("https://developer.apple.com/documentation/coreml",),
    )
    code_sample = """import coremltools as ct
from executorch.backends.apple.coreml.compiler import CoreMLBackend
from executorch.backends.apple.coreml.partition import CoreMLPartitioner
partitioner = [CoreMLPartitioner(compile_specs=CoreMLBackend.generate_compile_specs(
    compute_precision=ct.precision.FLOAT16, minimum_deployment_target=ct.target.iOS15))]"""

    def partitioners(self, precision):
        import coremltools as ct
        from executorch.backends.apple.coreml.compiler import CoreMLBackend
        from executorch.backends.apple.coreml.partition import CoreMLPartitioner

        compute = ct.precision.FLOAT32 if precision is Precision.FP32 else ct.precision.FLOAT16
        specs = CoreMLBackend.generate_compile_specs(
            compute_precision=compute, minimum_deployment_target=ct.target.iOS15
        )
        return [CoreMLPartitioner(compile_specs=specs)]
