from __future__ import annotations

from .base import Backend, Check, Docs, platform_check


class Metal(Backend):
    name = "metal"
    ray_resource = "macos"
    order = 40
    priority = {"ios": 1}
    title = "Metal (Apple GPU)"
    runtime_name = "MetalBackend"
    platforms = ("ios", "macos")
    lowers_not_on = {os: "Metal lowers only on macOS (AOTInductor compiles it with Apple's toolchain)" for os in ("linux", "windows")}
    hardware = "GPU"
    use_case = "Apple GPU acceleration (successor of MPS)"
    description = "Apple GPU (Metal)"
    docs = Docs(
        overview=(
            "The Metal backend compiles the graph with AOTInductor into Metal shaders for "
            "Apple GPUs. It replaces the MPS delegate removed in ExecuTorch 1.5."
        ),
        features=("fp32 compute on the Apple GPU.",),
        target_requirements=("Apple silicon Mac (macOS 14+) or iOS device with Metal 3.",),
        development_requirements=("A macOS machine: lowering needs torchao's MPS ops (libtorchao_ops_mps_aten.dylib).",),
        cmake_targets=("metal_backend",),
        build_flags=("-DEXECUTORCH_BUILD_METAL=ON",),
        prebuilt="In the macOS/iOS Swift packages from ExecuTorch 1.5.",
    )
    code_sample = """from executorch.backends.apple.metal.metal_partitioner import MetalPartitioner
partitioner = [MetalPartitioner([])]"""

    def lower_check(self) -> Check:
        return platform_check("darwin", "Metal") or Check(True, "macOS")

    def partitioners(self, precision):
        from executorch.backends.apple.metal.metal_partitioner import MetalPartitioner

        return [MetalPartitioner([])]
