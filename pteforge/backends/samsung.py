from __future__ import annotations

from ..core.spec import Precision
from .base import Backend, Check, Docs, _module_exists

_FIX = (
    "install Samsung's Exynos AI LiteCore SDK, export EXYNOS_AI_LITECORE_ROOT and build "
    "ExecuTorch's Samsung Python wrapper (PyEnnWrapperAdaptor)"
)


class Samsung(Backend):
    name = "samsung"
    ray_resource = "exynos"
    order = 130
    title = "Samsung Exynos (ENN)"
    aliases = ("exynos", "enn")
    runtime_name = "EnnBackend"
    platforms = ("android",)
    lowers_not_on = {os: "Samsung's Exynos AI LiteCore SDK is for Linux x86_64 hosts" for os in ("macos", "windows")}
    hardware = "NPU"
    use_case = "Samsung Exynos NPUs"
    description = "Samsung Exynos NPU (ENN)"
    precisions = (Precision.FP32, Precision.INT8)
    default_precision = Precision.FP32
    chipset = "E9955"
    docs = Docs(
        overview="The Samsung delegate compiles the graph with the Exynos AI LiteCore SDK (ENN) for Exynos NPUs.",
        features=("fp32 and int8 (EnnQuantizer).",),
        target_requirements=("Samsung Exynos 2500 (E9955) class devices, Android.",),
        development_requirements=("Samsung's Exynos AI LiteCore SDK and the PyEnnWrapperAdaptor extension built from ExecuTorch.",),
        cmake_targets=("enn_backend",),
        build_flags=("-DEXECUTORCH_BUILD_ENN=ON",),
        prebuilt="Not prebuilt: build with the Exynos AI LiteCore SDK.",
    )
    code_sample = """from executorch.backends.samsung.partition.enn_partitioner import EnnPartitioner
from executorch.backends.samsung.serialization.compile_options import gen_samsung_backend_compile_spec
partitioner = [EnnPartitioner([gen_samsung_backend_compile_spec("E9955")])]"""

    def lower_check(self) -> Check:
        if not _module_exists("executorch.backends.samsung.python.PyEnnWrapperAdaptor"):
            return Check(False, "the Samsung ENN SDK wrapper (PyEnnWrapperAdaptor) is not built", _FIX)
        return Check(True, "ENN wrapper found")

    def partitioners(self, precision):
        from executorch.backends.samsung.partition.enn_partitioner import EnnPartitioner
        from executorch.backends.samsung.serialization.compile_options import (
            gen_samsung_backend_compile_spec,
        )

        return [EnnPartitioner([gen_samsung_backend_compile_spec(self.chipset)])]
