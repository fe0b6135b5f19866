"""Every registered backend through the same assertions (one parametrized fixture).

Run one backend's tests with ``pytest -m backend_xnnpack``.
"""

from pathlib import Path

import pytest
from conftest import marker_name

from pteforge.api import plan_targets
from pteforge.backends import ALL_BACKENDS, default_registry
from pteforge.errors import NoBackendError
from pteforge.pte import read_pte
from pteforge.result import Status
from pteforge.runtime import registered_backends
from pteforge.spec import ExportConfig, InputSpec, Target

BACKENDS = [pytest.param(cls.name, marks=getattr(pytest.mark, marker_name(cls.name)), id=cls.name) for cls in ALL_BACKENDS]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return default_registry().get(request.param)


@pytest.fixture(scope="module")
def tiny_capture(tmp_path_factory):
    from pteforge.models.custom import factory_spec
    from pteforge.stages.capture import capture

    spec = factory_spec("tiny_models:tiny", (InputSpec((1, 3, 16, 16)),), name="tiny")
    work = tmp_path_factory.mktemp("capture")
    config = ExportConfig(out_dir=work / "out", weights="none", calibration_samples=4, verify_inputs=2)
    return spec, capture(spec, config, work), config


def test_declares_its_facts(backend):
    assert backend.platforms and backend.hardware and backend.use_case
    assert backend.default_precision in backend.precisions
    assert backend.docs.overview and backend.code_sample


def test_availability_has_reasons(backend):
    lower = backend.lower_check()
    run = backend.run_check(registered_backends())
    for check in (lower, run):
        assert check.reason.strip()
        if not check.ok:
            assert check.fix and check.fix.strip(), "an unavailable backend must say how to fix it"


def test_unavailable_backend_is_refused_before_any_work(backend):
    if backend.lower_check().ok:
        pytest.skip(f"{backend.name} lowers here")
    with pytest.raises(NoBackendError, match=r"No available backends from requested"):
        plan_targets([backend.name])


def test_lowers_tiny_model_with_its_delegate(backend, tiny_capture):
    if not backend.lower_check().ok:
        pytest.skip(f"{backend.name} cannot lower here: {backend.lower_check().reason}")
    from pteforge.pipeline import export_target

    spec, cap, config = tiny_capture
    target = Target((backend.name,), backend.default_precision)
    record = export_target(cap, spec, target, config, registered_backends())
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
    if backend.run_check(registered_backends()).ok:
        assert record.status is Status.VERIFIED, record.reason
        assert record.verification.passed
    else:
        assert record.status is Status.NOT_RUNNABLE_HERE
        assert backend.run_check(registered_backends()).reason in record.reason
    assert Path(record.artifact.path).stat().st_size == record.artifact.size
