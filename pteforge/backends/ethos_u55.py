from __future__ import annotations

from ..spec import Precision
from ._arm import EthosU
from .base import Docs


class EthosU55(EthosU):
    name = "ethos-u55"
    title = "Arm Ethos-U55"
    aliases = ("arm", "ethos-u", "ethosu", "u55")
    app_name = "arm"
    target = "ethos-u55-128"
    recipe_names = {Precision.INT8: "ETHOS_U55_INT8"}
    use_case = "Ultra-low-power int8 inference on Cortex-M microcontrollers with an Ethos-U55 NPU"
    description = "Arm Ethos-U55 NPU (int8)"
    docs = Docs(
        overview=(
            "The Ethos-U delegate compiles int8 TOSA graphs with Arm's Vela compiler into "
            "command streams for the Ethos-U55 microNPU beside a Cortex-M CPU."
        ),
        features=("int8 only (Arm quantizer, per-channel weights).", "128 MACs configuration (ethos-u55-128)."),
        target_requirements=("A Cortex-M (M55/M85) with an Ethos-U55 NPU, e.g. Corstone-300.",),
        development_requirements=("ethos-u-vela==5.1.0 and tosa-tools==2026.5.0 from PyPI.",),
        cmake_targets=("executorch_delegate_ethos_u", "cortex_m_kernels"),
        build_flags=("-DEXECUTORCH_BUILD_ARM_BAREMETAL=ON",),
        prebuilt="Not prebuilt: cross-compile the bare-metal runtime with Arm's toolchain.",
        links=("https://developer.arm.com/Processors/Ethos-U55",),
    )
    code_sample = """from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
spec = EthosUCompileSpec("ethos-u55-128")
quantizer = EthosUQuantizer(spec)
quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
partitioner = [EthosUPartitioner(spec)]"""
