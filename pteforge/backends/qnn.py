from __future__ import annotations

from ..core.spec import Precision
from .base import Backend, Check, Docs, env_dir_check

_FIX = "install Qualcomm's QNN SDK (AI Engine Direct) and export QNN_SDK_ROOT=/path/to/qairt/<version>"


class QNN(Backend):
    name = "qnn"
    ray_resource = "qnn"
    order = 60
    priority = {"android": 0}
    title = "Qualcomm AI Engine Direct (QNN)"
    aliases = ("qualcomm",)
    runtime_name = "QnnBackend"
    platforms = ("android",)
    lowers_not_on = {os: "Qualcomm's QNN SDK and ExecuTorch's QNN wrapper are built for Linux x86_64 hosts" for os in ("macos", "windows")}
    hardware = "NPU"
    use_case = "Qualcomm Snapdragon NPUs (Hexagon HTP)"
    description = "Qualcomm NPU (QNN HTP)"
    precisions = (Precision.FP16, Precision.INT8)
    default_precision = Precision.FP16
    soc = "SM8650"  # Snapdragon 8 Gen 3
    docs = Docs(
        overview="The QNN delegate compiles the graph with Qualcomm's AI Engine Direct SDK for the Hexagon NPU.",
        features=("fp16 on HTP; 8-bit and 16-bit quantization (QnnQuantizer).",),
        target_requirements=("Snapdragon 8 Gen 1/2/3, 888, 865, 778G and newer, Android.",),
        development_requirements=("Qualcomm's QNN SDK with QNN_SDK_ROOT set (otherwise ExecuTorch tries to download it).",),
        cmake_targets=("qnn_executorch_backend",),
        build_flags=("-DEXECUTORCH_BUILD_QNN=ON", "-DQNN_SDK_ROOT=$QNN_SDK_ROOT"),
        prebuilt="A QNN variant of the Android AAR exists; the QNN libraries ship with the SDK.",
        links=("https://www.qualcomm.com/developer/software/qualcomm-ai-engine-direct-sdk",),
    )
    code_sample = """from executorch.backends.qualcomm.partition.qnn_partitioner import QnnPartitioner
from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
from executorch.backends.qualcomm.utils.utils import (
    generate_htp_compiler_spec, generate_qnn_executorch_compiler_spec)
specs = generate_qnn_executorch_compiler_spec(
    soc_model=QcomChipset.SM8650, backend_options=generate_htp_compiler_spec(use_fp16=True))
partitioner = [QnnPartitioner(specs)]"""

    def lower_check(self) -> Check:
        # Checked before any work: without QNN_SDK_ROOT the partitioner tries a download.
        return env_dir_check("QNN_SDK_ROOT", "the QNN SDK is needed to lower", _FIX) or Check(
            True, "QNN_SDK_ROOT is set"
        )

    def run_check(self, host):
        missing = env_dir_check("QNN_SDK_ROOT", "the QNN libraries are needed to run", _FIX)
        return missing or super().run_check(host)

    def partitioners(self, precision):
        from executorch.backends.qualcomm.partition.qnn_partitioner import QnnPartitioner
        from executorch.backends.qualcomm.serialization.qc_schema import QcomChipset
        from executorch.backends.qualcomm.utils.utils import (
            generate_htp_compiler_spec,
            generate_qnn_executorch_compiler_spec,
        )

        specs = generate_qnn_executorch_compiler_spec(
            soc_model=getattr(QcomChipset, self.soc),
            backend_options=generate_htp_compiler_spec(use_fp16=precision is Precision.FP16),
        )
        return [QnnPartitioner(specs)]

    def quantizer(self, precision):
        if precision is not Precision.INT8:
            return None
        from executorch.backends.qualcomm.quantizer.quantizer import QnnQuantizer, QuantDtype

        quantizer = QnnQuantizer()
        quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True)
        return quantizer
