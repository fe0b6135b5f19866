from __future__ import annotations

from .base import Backend, Docs


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
    docs = Docs(
        overview=(
            "The WebGPU backend is a frontend to Vulkan's partitioner and serializer; its "
            "programs run on the WebGPU runtime (WGSL shaders) in a browser. Experimental in 1.5."
        ),
        features=("fp32 compute.", "Same operator coverage as Vulkan's partitioner, minus a few ops."),
        target_requirements=("A browser with WebGPU, and ExecuTorch built for WebAssembly with WebGPU.",),
        development_requirements=("Nothing beyond the executorch pip package.",),
        cmake_targets=("webgpu_backend",),
        build_flags=("-DEXECUTORCH_BUILD_WEBGPU=ON",),
        prebuilt="Not in prebuilt packages; build ExecuTorch for WebAssembly from source.",
    )
    code_sample = """from executorch.backends.webgpu.partitioner import WebGPUPartitioner
partitioner = [WebGPUPartitioner()]"""

    def lowering_key(self, precision):
        # WebGPUPartitioner is VulkanPartitioner with the same (default) options, and
        # the plan is the same: a WebGPU program is the fp32 Vulkan program.
        return ("vulkan", precision.value)

    def lowering_context(self):
        from .vulkan import patterns_where_they_can_match

        return patterns_where_they_can_match()

    def partitioners(self, precision):
        from executorch.backends.webgpu.partitioner import WebGPUPartitioner

        return [WebGPUPartitioner()]
