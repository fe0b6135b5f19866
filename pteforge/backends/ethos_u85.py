from __future__ import annotations

from ..spec import Precision
from ._arm import EthosU
from .base import Docs


class EthosU85(EthosU):
    name = "ethos-u85"
    title = "Arm Ethos-U85"
    aliases = ("u85",)
    app_name = "arm"
    target = "ethos-u85-256"
    recipe_names = {Precision.INT8: "ETHOS_U85_INT8"}
    use_case = "Low-power int8 inference on embedded systems with an Ethos-U85 NPU"
    description = "Arm Ethos-U85 NPU (int8)"
    docs = Docs(
        overview=(
            "The Ethos-U delegate compiles int8 TOSA graphs with Arm's Vela compiler into "
            "command streams for the Ethos-U85 microNPU beside a Cortex-M CPU."
        ),
        features=("int8 only (Arm quantizer, per-channel weights).", "256 MACs configuration (ethos-u85-256)."),
        target_requirements=("A Cortex-M or Cortex-A system with an Ethos-U85 NPU, e.g. Corstone-320.",),
        development_requirements=("ethos-u-vela==5.1.0 and tosa-tools==2026.5.0 from PyPI.",),
        cmake_targets=("executorch_delegate_ethos_u", "cortex_m_kernels"),
        build_flags=("-DEXECUTORCH_BUILD_ARM_BAREMETAL=ON",),
        prebuilt="Not prebuilt: cross-compile the bare-metal runtime with Arm's toolchain.",
        links=("https://developer.arm.com/Processors/Ethos-U85",),
    )
    code_sample = """from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
spec = EthosUCompileSpec("ethos-u85-256")
quantizer = EthosUQuantizer(spec)
quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
partitioner = [EthosUPartitioner(spec)]"""
