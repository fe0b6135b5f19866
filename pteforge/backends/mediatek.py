from __future__ import annotations

from ..core.spec import Precision
from .base import Backend, Docs, Requirement


class MediaTek(Backend):
    name = "mediatek"
    ray_resource = "neuropilot"
    order = 70
    title = "MediaTek NeuroPilot"
    aliases = ("neuropilot",)
    runtime_name = "NeuropilotBackend"
    platforms = ("android",)
    lowers_not_on = {os: "MediaTek's NeuroPilot Express SDK wheels are for Linux x86_64 hosts" for os in ("macos", "windows")}
    hardware = "NPU"
    use_case = "MediaTek Dimensity NPUs (APU)"
    description = "MediaTek NPU (NeuroPilot)"
    precisions = (Precision.INT8, Precision.FP16)
    default_precision = Precision.INT8
    requires = (
        Requirement(
            "mtk_converter",
            "install MediaTek's NeuroPilot Express SDK wheels (mtk_converter, mtk_neuron) from MediaTek",
        ),
    )
    docs = Docs(
        overview="The MediaTek delegate compiles the graph with NeuroPilot for the APU in Dimensity SoCs.",
        features=("int8 (NeuropilotQuantizer) and fp16.",),
        target_requirements=("MediaTek Dimensity 9300/9400 class devices, Android.",),
        development_requirements=("MediaTek's NeuroPilot Express SDK: mtk_converter and mtk_neuron wheels.",),
        cmake_targets=("neuron_backend",),
        build_flags=("-DEXECUTORCH_BUILD_NEURON=ON", "-DNEURON_BUFFER_ALLOCATOR_LIB=..."),
        prebuilt="Not prebuilt: build with the NeuroPilot SDK.",
    )
    code_sample = """from executorch.backends.mediatek.partitioner import NeuropilotPartitioner
from executorch.exir.backend.compile_spec_schema import CompileSpec
partitioner = [NeuropilotPartitioner([CompileSpec("platform-config", b"mt6989")])]"""

    def partitioners(self, precision):
        from executorch.backends.mediatek.partitioner import NeuropilotPartitioner
        from executorch.exir.backend.compile_spec_schema import CompileSpec

        return [NeuropilotPartitioner([CompileSpec("platform-config", b"mt6989")])]

    def quantizer(self, precision):
        if precision is not Precision.INT8:
            return None
        from executorch.backends.mediatek.quantizer import NeuropilotQuantizer, Precision as MtkPrecision

        quantizer = NeuropilotQuantizer()
        quantizer.setup_precision(MtkPrecision.A8W8)
        return quantizer
