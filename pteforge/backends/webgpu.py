from __future__ import annotations

from ..core.spec import Precision
from .base import Backend, Docs
from .vulkan import FP32_CAUTION, compile_options


class WebGPU(Backend):
    name = "webgpu"
    order = 170
    title = "WebGPU"
    # WebGPU reuses Vulkan's partitioning and serialization: its programs carry the
    # VulkanBackend delegate id, executed by the WebGPU runtime in the browser.
    runtime_name = "VulkanBackend"
    platforms = ("web",)
    hardware = "GPU"
    use_case = "GPU in the browser (WebGPU), experimental"
    description = "Browser GPU (WebGPU)"
    precisions = (Precision.FP16, Precision.FP32)
    default_precision = Precision.FP16
    docs = Docs(
        overview=(
            "The WebGPU backend is a frontend to Vulkan's partitioner and serializer; its "
            "programs run on the WebGPU runtime (WGSL shaders) in a browser. Experimental in 1.5."
        ),
        features=(
            "fp16 by default, with Vulkan's options (`force_fp16`, texture limits 2048): a browser on an Android "
            "phone runs WebGPU on the phone's Vulkan driver, and " + FP32_CAUTION[0].lower() + FP32_CAUTION[1:] + ". "
            "The browser needs WebGPU's `shader-f16` feature; `--backends webgpu:fp32` exports fp32.",
            "Same operator coverage as Vulkan's partitioner, minus a few ops.",
        ),
        target_requirements=("A browser with WebGPU, and ExecuTorch built for WebAssembly with WebGPU.",),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("webgpu_backend",),
        build_flags=("-DEXECUTORCH_BUILD_WEBGPU=ON",),
        prebuilt="Not in prebuilt packages; build ExecuTorch for WebAssembly from source.",
    )
    code_sample = """from executorch.backends.webgpu.partitioner import WebGPUPartitioner
partitioner = [WebGPUPartitioner({"force_fp16": True, "texture_limits": (2048, 2048, 2048)})]"""

    def lowering_key(self, precision):
        # WebGPUPartitioner is VulkanPartitioner with the same options, and the plan is
        # the same: a WebGPU program is the Vulkan program of its precision.
        return ("vulkan", precision.value)

    def lowering_context(self):
        from .vulkan import patterns_where_they_can_match

        return patterns_where_they_can_match()

    def partitioners(self, precision):
        from executorch.backends.webgpu.partitioner import WebGPUPartitioner

        return [WebGPUPartitioner(compile_options(precision))]

    def caution(self, precision):
        return FP32_CAUTION if precision is Precision.FP32 else None
