"""Every registered backend through the same assertions (one parametrized fixture).

Run one backend's tests with ``pytest -m backend_xnnpack``.
"""

import os
import sys
from pathlib import Path

import pytest
from conftest import marker_name

from pteforge.api import plan_targets
from pteforge.backends import backend_classes, default_registry
from pteforge.core.errors import NoBackendError
from pteforge.runtime.pte import read_pte
from pteforge.core.result import Status
from pteforge.runtime.host import host
from pteforge.core.spec import ExportConfig, InputSpec, Target

BACKENDS = [pytest.param(cls.name, marks=getattr(pytest.mark, marker_name(cls.name)), id=cls.name) for cls in backend_classes()]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return default_registry().get(request.param)


def test_declares_its_facts(backend):
    assert backend.platforms and backend.hardware and backend.use_case
    assert backend.default_precision in backend.precisions
    assert backend.docs.overview and backend.code_sample


def test_availability_has_reasons(backend):
    lower = backend.lower_check()
    run = backend.run_check(host())
    for check in (lower, run):
        assert check.reason.strip()
        if not check.ok:
            assert check.fix and check.fix.strip(), "an unavailable backend must say how to fix it"


def test_unavailable_backend_is_refused_before_any_work(backend):
    if backend.lower_check().ok:
        pytest.skip(f"{backend.name} lowers here")
    with pytest.raises(NoBackendError, match=r"No available backends from requested"):
        plan_targets([backend.name])


PRECISIONS = [
    pytest.param(cls.name, p, marks=getattr(pytest.mark, marker_name(cls.name)), id=f"{cls.name}:{p.value}")
    for cls in backend_classes()
    for p in cls.precisions
]


@pytest.fixture(scope="module")
def weighty_capture(tmp_path_factory):
    from pteforge.models.factory import factory_spec
    from pteforge.stages.capture import capture

    spec = factory_spec("tiny_models:weighty", (InputSpec((1, 3, 16, 16)),), name="weighty")
    work = tmp_path_factory.mktemp("weighty")
    config = ExportConfig(out_dir=work / "out", weights="none", calibration_samples=4, verify_inputs=2)
    variants = tuple((cls.name, p) for cls in backend_classes() for p in cls.source_transform_precisions)
    return spec, capture(spec, config, work, variants=variants), config


_records: dict[str, object] = {}


def _export(target, weighty_capture):
    """Each target of the weighty model is lowered once per session (fp32 references are shared)."""
    from pteforge.stages.pipeline import export_target

    if target.name not in _records:
        spec, cap, config = weighty_capture
        _records[target.name] = export_target(cap, spec, target, config, host())
    return _records[target.name]


@pytest.mark.parametrize("name, precision", PRECISIONS)
def test_each_precision_lowers_with_its_delegate_and_shows_in_the_artifact(name, precision, weighty_capture):
    """Every precision a backend declares lowers here (when the backend does) into a
    program that holds exactly its delegate, runs and matches eager when its runtime
    is here (else says which runtime is missing), which names no folder of this disk (Core AI's
    debug conversion wrote the model's Python stacks), and whose graphs show the precision:
    quantize/dequantize nodes for integer precisions, fp16 nodes or a smaller file for
    fp16; reduced precisions are smaller than the fp32 artifact."""
    from pteforge.app.precision import fp32_reference
    from pteforge.core.spec import Precision

    backend = default_registry().get(name)
    if not backend.lower_check().ok:
        pytest.skip(f"{name} cannot lower here: {backend.lower_check().reason}")
    target = Target((name,), precision, default_precision=precision is backend.default_precision)
    record = _export(target, weighty_capture)
    assert record.artifact is not None, f"{record.status}: {record.reason}"
    facts = read_pte(record.artifact.path)
    expected = backend.expected_delegate()
    if expected:
        assert set(facts.delegates) == {expected}, "the artifact holds exactly its backend's delegate"
        assert record.artifact.delegation.nodes_per_backend[expected] > 0
    else:
        assert facts.delegates == []
        namespace = getattr(backend, "ops_namespace", None)
        if namespace:
            assert any(op.startswith(f"{namespace}::") for op in facts.operators)
    if backend.run_check(host()).ok:
        assert record.status is Status.VERIFIED, record.reason
        assert record.verification.passed
    elif backend.simulated_on:  # proven on its reference simulator instead, and said so
        assert record.status is Status.SIMULATED, record.reason
        assert record.verification.passed and record.verification.simulator == backend.simulated_on
        assert not record.verification.method.startswith("this host's ExecuTorch runtime")
    else:
        assert record.status is Status.NOT_RUNNABLE_HERE
        assert backend.run_check(host()).reason in record.reason
    assert Path(record.artifact.path).stat().st_size == record.artifact.size
    data = Path(record.artifact.path).read_bytes()  # an app downloads it: no path of this disk in it
    for folder in (sys.prefix, str(Path(__file__).parents[1])):  # the environment's, the model's file's (tests/)
        assert os.path.join(folder, "").encode() not in data, f"{name}'s program names {folder}"

    if "operators" in (record.quantization or {}):  # a PT2E program: its row says what set its activations' scales
        unset = {"int8-dynamic": "scaled at run time", "int8-weight": "kept in floating point",
                 "int4-weight": "kept in floating point"}.get(precision.value)
        assert record.quantization.get("activations") == unset, record.quantization
        assert ("calibration" in record.quantization) is (unset is None), record.quantization

    evidence = record.artifact.delegation.precision_ops
    if precision is Precision.FP32:
        assert not evidence.get("quantize_ops") and not evidence.get("fp16_nodes"), evidence
        return
    ref = _export(fp32_reference(target), weighty_capture)
    assert ref.artifact is not None, ref.reason
    ratio = record.artifact.size / ref.artifact.size
    if precision.quantized:
        assert evidence.get("quantize_ops", 0) > 0, f"no quantize/dequantize nodes in {name}:{precision.value}"
        assert ratio < 0.8, f"{name}:{precision.value} is {ratio:.2f}x the fp32 size"
    else:  # fp16
        assert evidence.get("fp16_nodes", 0) > 0 or ratio < 0.7, f"no sign of fp16: {evidence}, {ratio:.2f}x size"


@getattr(pytest.mark, marker_name("coreml"))
def test_a_model_in_half_precision_lowers_to_core_ml(tmp_path):
    """coremltools takes fp16 inputs from iOS 16 only: a model in half precision raises
    Core ML's deployment target to iOS 16 (it failed: 'To use fp16 input, please set minimum
    deployment target to iOS16+'), while an fp32 model keeps iOS 15."""
    import coremltools as ct
    from executorch.backends.apple.coreml.compiler import CoreMLBackend

    from pteforge.models.factory import factory_spec
    from pteforge.stages.pipeline import export_target
    from pteforge.core.spec import Precision
    from pteforge.stages.capture import capture

    coreml = default_registry().get("coreml")
    if not coreml.lower_check().ok:
        pytest.skip(coreml.lower_check().reason)
    spec = factory_spec("tiny_models:half", (InputSpec((1, 8), "float16"),), name="half")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", verify_inputs=1)
    cap = capture(spec, config, tmp_path / "work")
    record = export_target(cap, spec, Target(("coreml",), Precision.FP16), config, host())
    assert record.artifact is not None, f"{record.status}: {record.reason}"
    assert read_pte(record.artifact.path).delegates == ["CoreMLBackend"]

    import torch

    def target_of(program):
        [partitioner] = coreml.fit(program, coreml.partitioners(Precision.FP16))
        return CoreMLBackend.min_deployment_target_from_compile_specs(partitioner.delegation_spec.compile_specs)

    model = torch.nn.Linear(8, 4)
    assert target_of(torch.export.export(model, (torch.randn(1, 8),))) == ct.target.iOS15
    assert target_of(torch.export.export(model.half(), (torch.randn(1, 8).half(),))) == ct.target.iOS16


def test_a_camera_frame_model_lowers_to_core_ml_around_its_uint8_nodes():
    """coremltools converts no uint8 tensor ("KeyError: torch.uint8" for a model that takes
    camera bytes): the nodes touching uint8 stay on the portable kernels and Core ML takes
    the float rest of the graph."""
    import torch

    from pteforge.core.spec import Precision
    from pteforge.stages.lower import delegation_of, lower

    coreml = default_registry().get("coreml")
    if not coreml.lower_check().ok:
        pytest.skip(coreml.lower_check().reason)

    class Frame(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):  # NHWC uint8, as a camera gives it
            return torch.relu(self.conv(x.permute(0, 3, 1, 2).float() / 255))

    program = torch.export.export(Frame().eval(), (torch.randint(0, 255, (1, 8, 8, 3), dtype=torch.uint8),))
    plan = coreml.plan(Precision.FP16)
    with pytest.raises(KeyError, match="uint8"):  # ExecuTorch and coremltools alone
        coreml.lower(program, plan, [])
    edge = lower(program, [coreml], Precision.FP16, plan)
    delegation = delegation_of(edge.exported_program().graph_module)
    assert delegation.nodes_per_backend["CoreMLBackend"] >= 3  # convolution, division, relu
    assert {op.op for op in delegation.portable_ops} == {"aten_permute_copy_default",
                                                          "dim_order_ops__to_dim_order_copy_default"}


_ALL = list(default_registry())
SAME_LOWERING = [
    pytest.param(a.name, b.name, p, id=f"{a.name}={b.name}:{p.value}")
    for i, a in enumerate(_ALL)
    for b in _ALL[i + 1:]
    for p in a.precisions
    if p in b.precisions and a.lowering_key(p) == b.lowering_key(p)
]


@pytest.mark.parametrize("first, second, precision", SAME_LOWERING)
def test_backends_that_claim_the_same_lowering_make_the_same_bytes(first, second, precision, weighty_capture):
    """A run lowers targets with equal ``lowering_key``s once and copies the program: each
    such claim is checked here by lowering both, separately, and comparing the bytes."""
    registry = default_registry()
    for name in (first, second):
        if not registry.get(name).lower_check().ok:
            pytest.skip(f"{name} cannot lower here: {registry.get(name).lower_check().reason}")
    a, b = (_export(Target((n,), precision, default_precision=precision is registry.get(n).default_precision),
                    weighty_capture) for n in (first, second))
    assert a.artifact is not None and b.artifact is not None, (a.reason, b.reason)
    assert a.artifact.sha256 == b.artifact.sha256


@pytest.mark.parametrize("name", ["vulkan", "webgpu"])
def test_vulkan_programs_are_made_as_phones_proved_them(name, weighty_capture):
    """fp16 and texture limits 2048 by default, texture storage never overridden (the
    executorch_flutter models repo's device fixes); fp32 on request, with its caution."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    from pteforge.core.spec import Precision

    def specs(target):
        record = _export(target, weighty_capture)
        program = deserialize_pte_binary(Path(record.artifact.path).read_bytes())
        [delegate] = getattr(program, "program", program).execution_plan[0].delegates
        return record, {c.key: bytes(c.value) for c in delegate.compile_specs}

    backend = default_registry().get(name)
    assert backend.default_precision is Precision.FP16
    record, fp16 = specs(Target((name,), Precision.FP16, default_precision=True))
    limit = (2048).to_bytes(4, "little")
    assert fp16 == {"texture_limits_x": limit, "texture_limits_y": limit, "texture_limits_z": limit, "force_fp16": b"\x01"}
    assert record.caution is None and record.target == name
    record, fp32 = specs(Target((name,), Precision.FP32, default_precision=False))
    assert "force_fp16" not in fp32 and fp32["texture_limits_x"] == limit and "storage_type_override" not in fp32
    assert "Adreno and Mali" in record.caution


def test_metal_lowers_with_the_device_workarounds():
    """Layout optimization off while Metal lowers (pytorch/executorch#22951); the libomp link
    caution beside every Metal artifact (#22955). Metal lowers only on a Mac: this checks the
    context and the facts, not a lowering."""
    import torch._inductor.config as inductor

    metal = default_registry().get("metal")
    before = inductor.layout_optimization
    with metal.lowering_context():
        assert inductor.layout_optimization is False
    assert inductor.layout_optimization == before
    assert "-dead_strip_dylibs" in metal.caution(metal.default_precision) and "22955" in metal.caution(metal.default_precision)
    [partitioner] = metal.partitioners(metal.default_precision)
    assert [s.key for s in partitioner.delegation_spec.compile_specs] == ["method_name"]


def test_the_backends_this_host_cannot_lower_say_why_in_one_line():
    """CUDA needs an NVIDIA GPU, TensorRT ExecuTorch 1.6: each says so, with what would do it."""
    import shutil

    registry = default_registry()
    if shutil.which("nvidia-smi") is None:
        cuda = registry.get("cuda").lower_check()
        assert not cuda.ok and "NVIDIA GPU" in cuda.reason and "nvidia-smi" in cuda.fix
    trt = registry.get("tensorrt")
    assert not trt.lower_check().ok and "ExecuTorch 1.6 and torch-tensorrt >= 2.15" in trt.lower_check().reason
    assert "pins 1.5.1" in trt.lower_check().fix and not trt.run_check(host()).ok
