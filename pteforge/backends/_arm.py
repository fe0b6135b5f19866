"""Shared pieces of the Arm backends (Ethos-U, TOSA, VGF). Not a backend itself."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import ClassVar

from ..core.spec import Precision
from .base import Backend, Docs, Requirement

VELA = Requirement("ethosu", "uv pip install ethos-u-vela==5.1.0", package="ethos-u-vela")
TOSA_TOOLS = Requirement("tosa_serializer", "uv pip install tosa-tools==2026.5.0", package="tosa-tools")


def tosa_inputs(payload: bytes) -> int:
    """How many inputs the TOSA graph's main block takes."""
    from tosa.TosaGraph import TosaGraph

    from .toolkit.simulate import SimulationError

    try:
        return TosaGraph.GetRootAs(payload, 0).Regions(0).Blocks(0).InputsLength()
    except Exception as exc:  # noqa: BLE001 - flatbuffers raise what they meet
        raise SimulationError(f"the TOSA payload ({len(payload)} bytes) is not a readable TOSA graph "
                              f"({type(exc).__name__}): it is damaged") from None


def tosa_reference_run(payload: bytes, inputs: list, outputs: list) -> list:
    """Run one TOSA flatbuffer on Arm's TOSA reference model: ``inputs`` are (tensor, dim
    order) in the graph's input order, ``outputs`` (sizes, dim order) of what it returns."""
    import numpy as np
    import torch

    from .toolkit.simulate import SimulationError, from_dim_order, to_dim_order

    try:
        import tosa_reference_model as reference
    except ImportError as exc:
        raise SimulationError(f"Arm's TOSA reference model cannot be imported ({exc}): reinstall it, "
                              f"{TOSA_TOOLS.install}") from None

    arrays = [to_dim_order(t, order).numpy() for t, order in inputs]
    key = (digest(payload), *(digest(a.tobytes()) + f"{a.dtype}{a.shape}" for a in arrays))
    if key in _RAN:  # the same graph on the same inputs (TOSA, Ethos-U55 and U85 lower one graph alike)
        return [t.clone() for t in _RAN[key]]
    try:
        results, status = reference.run(payload, arrays, verbosity="NONE", initialize_variable_tensor_from_numpy=1)
    except Exception as exc:  # noqa: BLE001 - the reference model's own refusal, said in one line
        raise SimulationError(f"the TOSA reference model refused the graph: {str(exc).splitlines()[0][:160]}") from None
    if status != reference.GraphStatus.TOSA_VALID:
        raise SimulationError(f"the TOSA reference model found the graph {status.name} (a valid one gives TOSA_VALID)")
    if len(results) != len(outputs):
        raise SimulationError(f"the TOSA graph returned {len(results)} outputs where the program expects {len(outputs)}")
    out = [from_dim_order(torch.from_numpy(np.ascontiguousarray(a)), sizes, order)
           for a, (sizes, order) in zip(results, outputs)]
    if len(_RAN) >= 64:
        _RAN.pop(next(iter(_RAN)))
    _RAN[key] = [t.clone() for t in out]
    return out


# What the reference model gave for a graph and its inputs, in this process: the targets of
# one model that lower one TOSA graph run on one worker, one after another (memo_group)
_RAN: dict[tuple, list] = {}


def tosa_simulator(delegate: str, graph_of=lambda payload: payload, note: str = "",
                   takes=lambda payload: True) -> list:
    """A stand-in for ``delegate`` that runs the TOSA graph ``graph_of(payload)`` on Arm's
    TOSA reference model (a missing or broken one fails the row that needs it, saying so)."""
    from .toolkit.simulate import Simulator

    return [Simulator(delegate, f"Arm's TOSA reference model (tosa-tools {_version('tosa-tools')})",
                      run=lambda payload, inputs, outputs: tosa_reference_run(graph_of(payload), inputs, outputs),
                      inputs=lambda payload: tosa_inputs(graph_of(payload)), note=note, takes=takes)]


def _version(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


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
    fork_server_imports = ("executorch.backends.arm._passes",)  # 0.34 s; its quantizer's and Cortex-M's too

    recipe_names: dict[Precision, str] = {}

    simulated_on: ClassVar[str | None] = "Arm's TOSA reference model"  # Backend's type: Vgf has none

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

    def lowering_context(self):
        from ..patches.executorch_patches import boundary_quantizes_join_their_producer, fused_activations_clamp_in_tosa

        context = contextlib.ExitStack()
        context.enter_context(fused_activations_clamp_in_tosa())  # a ReLU fused into a convolution clamps
        context.enter_context(boundary_quantizes_join_their_producer())  # a partition ends on int8 (see the patches)
        return context

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

    def simulators(self):
        return tosa_simulator(self.runtime_name, _compiled_from,
                              f"that is, the TOSA graph Vela {_version('ethos-u-vela')} compiled into it, with the same "
                              "spec and quantization: Vela's command stream itself runs only on an Ethos-U",
                              takes=lambda payload: _vela_graph(digest(payload)) is not None)

    def estimates(self, payloads):
        found = [_VELA[digest(p)][1] for p in payloads if digest(p) in _VELA]
        return _summed(found) if found and len(found) == len(payloads) else None

    def lowering_context(self):
        context = contextlib.ExitStack()
        context.enter_context(super().lowering_context())
        context.enter_context(_recording_vela())
        return context

    def compile_spec(self, precision):
        from executorch.backends.arm.ethosu import EthosUCompileSpec

        return EthosUCompileSpec(self.target)

    def partitioner_for(self, spec):
        from executorch.backends.arm.ethosu import EthosUPartitioner

        return EthosUPartitioner(spec)


# The TOSA graph and Vela's estimates behind each command stream Vela compiled in this
# process, by the stream's sha256: a payload in a .pte is simulated only when its bytes
# are the very stream Vela made from that graph. Each graph is also kept in the user cache
# under that sha256 (``vela_store``), where ``validate`` finds it for the file the export wrote.
_VELA: dict[str, tuple[bytes, dict]] = {}


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def vela_store() -> Path:
    """Where the TOSA graphs behind Ethos-U streams are kept (``pteforge cache clear`` empties it)."""
    from ..core.io import cache_root

    return cache_root() / "vela"


def _keep_vela_graph(stream_digest: str, graph: bytes) -> None:
    """The TOSA graph behind a command stream, in the cache (content-addressed by the stream:
    written once, never changed; an unwritable cache keeps it in this process only)."""
    from ..core.io import keep

    path = vela_store() / f"{stream_digest}.tosa"
    if not path.is_file():
        keep(path, graph)


def _vela_graph(stream_digest: str) -> bytes | None:
    """The TOSA graph Vela compiled into the stream of that sha256: this process's, or the
    cache's (a graph kept there by an export on this machine)."""
    if stream_digest in _VELA:
        return _VELA[stream_digest][0]
    try:
        return (vela_store() / f"{stream_digest}.tosa").read_bytes()
    except OSError:
        return None


def _compiled_from(payload: bytes) -> bytes:
    from .toolkit.simulate import SimulationError

    found = _vela_graph(digest(payload))
    if found is None:
        raise SimulationError("the Ethos-U payload is not a command stream Vela compiled in an export on this machine, "
                              "so the TOSA graph behind it is unknown: simulate it in the export that makes it")
    return found


@contextlib.contextmanager
def _recording_vela():
    """Inside, ExecuTorch's Ethos-U backend keeps, for each command stream Vela compiles, the
    TOSA graph it compiled and Vela's network summary (its estimates)."""
    from executorch.backends.arm.ethosu import backend as ethosu

    original = ethosu.vela_compile

    def compile(tosa_flatbuffer, args, verbose=False, intermediate_path=None, block_placements=None):
        with tempfile.TemporaryDirectory(prefix="pteforge-vela-") as tmp:
            result = original(tosa_flatbuffer, list(args), verbose, intermediate_path or tmp, block_placements)
            estimates = _vela_summary(intermediate_path or tmp)
        stream = digest(result.processed_bytes)
        _VELA[stream] = (bytes(tosa_flatbuffer), estimates)
        _keep_vela_graph(stream, _VELA[stream][0])
        return result

    ethosu.vela_compile = compile
    try:
        yield
    finally:
        ethosu.vela_compile = original


def _vela_summary(directory) -> dict:
    """Vela's own estimates, from the network summary it writes beside its output."""
    found = sorted(Path(directory).rglob("*_summary_*.csv"))
    if not found:
        return {}
    with found[0].open(newline="") as f:
        row = next(csv.DictReader(f), {})

    def number(key):
        try:
            return float(row[key])
        except (KeyError, TypeError, ValueError):
            return None

    clock = number("core_clock")
    flash = [number(k) for k in ("off_chip_flash_memory_used", "on_chip_flash_memory_used")]
    return {
        "tool": f"Vela {version('ethos-u-vela')}",
        "accelerator": row.get("accelerator_configuration"),
        "system": row.get("system_config"),
        "memory_mode": row.get("memory_mode"),
        "clock_mhz": round(clock / 1e6) if clock else None,
        "cycles": int(number("cycles_total") or 0),
        "inference_ms": round(number("inference_time") * 1000, 4) if number("inference_time") is not None else None,
        "sram_kib": number("sram_memory_used"),
        "flash_kib": round(sum(v for v in flash if v is not None), 2),
        "macs": int(number("nn_macs") or 0),
    }


def _summed(parts: list[dict]) -> dict:
    """The estimates of a program's Ethos-U payloads together: they run one after another."""
    if len(parts) == 1:
        return dict(parts[0], estimated_by="Vela, at the configured clock: an estimate, not a measurement")
    total = dict(parts[0])
    for key in ("cycles", "inference_ms", "flash_kib", "macs"):
        values = [p.get(key) for p in parts]
        known = [v for v in values if v is not None]
        total[key] = round(sum(known), 4) if len(known) == len(values) else None
    total["sram_kib"] = max((p.get("sram_kib") or 0) for p in parts)
    total["payloads"] = len(parts)
    total["estimated_by"] = "Vela, at the configured clock: an estimate, not a measurement"
    return total
