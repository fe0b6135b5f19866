"""Shared pieces of the Arm backends (Ethos-U, TOSA, VGF). Not a backend itself."""

from __future__ import annotations

from ..spec import Precision
from .base import Backend, Docs, Requirement

VELA = Requirement("ethosu", "uv pip install ethos-u-vela==5.1.0", package="ethos-u-vela")
TOSA_TOOLS = Requirement("tosa_serializer", "uv pip install tosa-tools==2026.5.0", package="tosa-tools")


class ArmBackend(Backend):
    """An Arm backend: a compile spec, its partitioner and the matching Arm quantizer.

    Lowering follows ExecuTorch's Arm recipe for the precision (``recipe_names``):
    the same compile spec, quantizer and partitioner as Arm's aot_arm_compiler, plus
    what our own path used to miss — the delegate payload kept inline in the .pte
    (``extract_delegate_segments=False``, which the Arm runtime expects) and, for
    int8, the pass that turns the boundary quantize/dequantize into cortex_m kernels.
    """

    cost = 1.1  # TOSA lowering: mobilenet_v3_small fp32 10.2 s, XNNPACK's 9.2 s
    memo_group = "arm"  # TOSA, Ethos-U55 and U85 int8 quantize and convert mobilenet_v3_small alike

    recipe_names: dict[Precision, str] = {}

    def recipe(self, precision):
        name = self.recipe_names.get(precision)
        if name is None:
            return None
        from executorch.backends.arm.recipes import ArmRecipeProvider, ArmRecipeType

        return ArmRecipeProvider().create_recipe(ArmRecipeType[name], **self.recipe_kwargs())

    def recipe_kwargs(self) -> dict:
        return {}

    def compile_spec(self, precision: Precision):
        raise NotImplementedError

    def partitioner_for(self, spec):
        raise NotImplementedError

    def partitioners(self, precision):
        return [self.partitioner_for(self.compile_spec(precision))]

    def quantizer(self, precision):
        if precision is not Precision.INT8:
            return None
        from executorch.backends.arm.quantizer import get_symmetric_quantization_config
        from executorch.backends.arm.util._factory import create_quantizer

        quantizer = create_quantizer(self.compile_spec(precision))
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
        return quantizer


class EthosU(ArmBackend):
    """An Ethos-U NPU: a subclass names its Vela ``target`` (``ethos-u55-128``) and the
    ``system`` it sits in; title, description, docs and code sample follow from them."""

    runtime_name = "EthosUBackend"
    cost = 1.2  # TOSA lowering plus Vela
    app_name = "arm"
    hardware = "NPU"
    platforms = ("embedded",)
    precisions = (Precision.INT8,)
    default_precision = Precision.INT8  # Ethos-U only executes int8
    requires = (VELA, TOSA_TOOLS)
    target: str  # Vela accelerator configuration, e.g. ethos-u55-128
    system: str  # where the NPU sits, for the docs

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        npu, macs = cls.target.rsplit("-", 1)  # "ethos-u55", "128"
        model = npu.split("-")[1].upper()  # "U55"
        cls.title = f"Arm Ethos-{model}"
        cls.description = f"Arm Ethos-{model} NPU (int8)"
        cls.recipe_names = {Precision.INT8: f"ETHOS_{model}_INT8"}
        cls.docs = Docs(
            overview=(f"The Ethos-U delegate compiles int8 TOSA graphs with Arm's Vela compiler into "
                      f"command streams for the Ethos-{model} microNPU beside a Cortex-M CPU."),
            features=("int8 only (Arm quantizer, per-channel weights).", f"{macs} MACs configuration ({cls.target})."),
            target_requirements=(cls.system,),
            development_requirements=("ethos-u-vela==5.1.0 and tosa-tools==2026.5.0 from PyPI.",),
            cmake_targets=("executorch_delegate_ethos_u", "cortex_m_kernels"),
            build_flags=("-DEXECUTORCH_BUILD_ARM_BAREMETAL=ON",),
            prebuilt="Not prebuilt: cross-compile the bare-metal runtime with Arm's toolchain.",
            links=(f"https://developer.arm.com/Processors/Ethos-{model}",),
        )
        cls.code_sample = f"""from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
spec = EthosUCompileSpec("{cls.target}")
quantizer = EthosUQuantizer(spec)
quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
partitioner = [EthosUPartitioner(spec)]"""

    def recipe_kwargs(self):
        return {"macs": int(self.target.rsplit("-", 1)[1])}

    def compile_spec(self, precision):
        from executorch.backends.arm.ethosu import EthosUCompileSpec

        return EthosUCompileSpec(self.target)

    def partitioner_for(self, spec):
        from executorch.backends.arm.ethosu import EthosUPartitioner

        return EthosUPartitioner(spec)
