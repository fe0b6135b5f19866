from __future__ import annotations

from ..core.spec import Precision
from .base import Backend, Docs, Requirement


class NXP(Backend):
    name = "nxp"
    order = 120
    title = "NXP eIQ Neutron"
    aliases = ("neutron",)
    runtime_name = "NeutronBackend"
    platforms = ("embedded",)
    lowers_not_on = {os: "NXP's eIQ Neutron SDK wheel is for Linux hosts" for os in ("macos", "windows")}
    hardware = "NPU"
    use_case = "NXP i.MX RT / MCX microcontrollers with the eIQ Neutron NPU"
    description = "NXP eIQ Neutron NPU (int8)"
    precisions = (Precision.INT8,)
    default_precision = Precision.INT8
    target = "imxrt700"
    requires = (Requirement("eiq_neutron_sdk", "install NXP's eIQ Neutron SDK wheel (eiq_neutron_sdk) from NXP"),)
    docs = Docs(
        overview="The Neutron delegate compiles int8 graphs with NXP's eIQ Neutron converter.",
        features=("int8 only (NeutronQuantizer).",),
        target_requirements=("NXP i.MX RT700, MCX N and other SoCs with the Neutron NPU.",),
        development_requirements=("NXP's eIQ Neutron SDK (eiq_neutron_sdk).",),
        cmake_targets=("executorch_delegate_neutron",),
        build_flags=("-DEXECUTORCH_BUILD_NXP_NEUTRON=ON",),
        prebuilt="Not prebuilt: build with NXP's MCUXpresso SDK.",
    )
    code_sample = """from executorch.backends.nxp.neutron_partitioner import NeutronPartitioner
from executorch.backends.nxp.nxp_backend import generate_neutron_compile_spec
from executorch.backends.nxp.backend.neutron_target_spec import NeutronTargetSpec
spec = generate_neutron_compile_spec("imxrt700")
partitioner = [NeutronPartitioner(spec, NeutronTargetSpec("imxrt700"))]"""

    def _target_spec(self):
        from executorch.backends.nxp.backend.neutron_target_spec import NeutronTargetSpec

        return NeutronTargetSpec(self.target)

    def partitioners(self, precision):
        from executorch.backends.nxp.neutron_partitioner import NeutronPartitioner
        from executorch.backends.nxp.nxp_backend import generate_neutron_compile_spec

        return [NeutronPartitioner(generate_neutron_compile_spec(self.target), self._target_spec())]

    def quantizer(self, precision):
        from executorch.backends.nxp.quantizer.neutron_quantizer import NeutronQuantizer

        return NeutronQuantizer(self._target_spec())
