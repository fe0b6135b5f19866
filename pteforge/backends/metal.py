from __future__ import annotations

import contextlib
import warnings

from .base import Backend, Check, Docs, platform_check

# pytorch/executorch#22955: AOTInductor links the program's shared object against Homebrew's
# OpenMP, which no iPhone or user's Mac has
LIBOMP = ("link the app with -dead_strip_dylibs: a Metal program names /opt/llvm-openmp/lib/libomp.dylib "
          "(pytorch/executorch#22955) and fails to load without it")


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
        features=(
            "fp32 compute on the Apple GPU.",
            "Lowered with inductor's layout optimization off: with it on, the runtime's convolution ignores the "
            "strides inductor picks and MobileNet's top logit came out 3094 instead of 8.1 "
            "(pytorch/executorch#22951, fix in #22952; the executorch_flutter models repo's portable_aoti.py does "
            "the same). Outputs then match eager to 1e-6.",
            "Until pytorch/executorch#22955 is fixed (#22978): " + LIBOMP + ".",
        ),
        target_requirements=("Apple silicon Mac (macOS 14+) or iOS device with Metal 3.",),
        development_requirements=("A macOS machine: lowering needs torchao's MPS ops (libtorchao_ops_mps_aten.dylib).",),
        cmake_targets=("metal_backend",),
        build_flags=("-DEXECUTORCH_BUILD_METAL=ON",),
        prebuilt="In the macOS/iOS Swift packages from ExecuTorch 1.5.",
        links=("https://github.com/pytorch/executorch/issues/22951", "https://github.com/pytorch/executorch/issues/22955",
               "https://github.com/pytorch/executorch/pull/22952", "https://github.com/pytorch/executorch/pull/22978"),
    )
    code_sample = """import torch._inductor.config
from executorch.backends.apple.metal.metal_backend import MetalBackend
from executorch.backends.apple.metal.metal_partitioner import MetalPartitioner
partitioner = [MetalPartitioner([MetalBackend.generate_method_name_compile_spec("forward")])]
# lower inside torch._inductor.config.patch(layout_optimization=False) (pytorch/executorch#22951)"""

    def lower_check(self) -> Check:
        return platform_check("darwin", "Metal") or Check(True, "macOS")

    def partitioners(self, precision):
        from executorch.backends.apple.metal.metal_backend import MetalBackend
        from executorch.backends.apple.metal.metal_partitioner import MetalPartitioner

        with warnings.catch_warnings():  # "experimental": its docs page says so
            warnings.simplefilter("ignore")
            return [MetalPartitioner([MetalBackend.generate_method_name_compile_spec("forward")])]

    def lowering_context(self):
        return layout_optimization_off()

    def caution(self, precision):
        return LIBOMP


@contextlib.contextmanager
def layout_optimization_off():
    """AOTInductor keeps the model's own memory layout (pytorch/executorch#22951)."""
    import torch._inductor.config as inductor

    with inductor.patch(layout_optimization=False):
        yield
