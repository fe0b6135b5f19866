"""Generated command lines, config files and manifests: every one ends in success or in one
clean line with its own exit code; no traceback, no hang, nothing written (--dry-run plans
and stops, so each example costs milliseconds)."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pteforge.cli import main
from pteforge.core.errors import ExitStatus

CLEAN = {ExitStatus.OK, ExitStatus.TARGETS_FAILED, ExitStatus.USAGE, ExitStatus.NO_BACKEND, ExitStatus.MODEL,
         ExitStatus.WEIGHTS, ExitStatus.OUTPUT, ExitStatus.MANIFEST}
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
WORDS = ["xnnpack", "coreml", "vulkan", "mlx", "portable", "tosa", "openvino", "int8", "fp16", "fp32", "int8-dynamic",
         "8da4w", "bogus", "", "+", ":"]


@pytest.fixture
def quiet_dir(tmp_path, monkeypatch):
    """A working directory of its own: whatever a run writes outside --out and pteforge's
    own cache (this host's runtime facts, which a plan reads) shows up here."""
    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def _run(capsys, where: Path, *args) -> tuple[int, str]:
    before = sorted(p.name for p in where.iterdir())
    try:
        code = main([str(a) for a in args])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code in CLEAN, f"{args}: exit {code}\n{err}"
    assert "Traceback" not in out + err and "internal error" not in err, f"{args}:\n{err}"
    if code != ExitStatus.OK:
        errors = [line for line in err.splitlines() if line.startswith("error:") or line.startswith("❌")]
        assert len(errors) == 1 or "usage:" in err, f"{args}: not one clean line:\n{err}"
    assert sorted(p.name for p in where.iterdir()) == before, f"{args} wrote {set(p.name for p in where.iterdir()) - set(before)}"
    return code, out + err


@FUZZ
@given(shape=st.text(alphabet="0123456789,x -:=ab.", max_size=16))
def test_input_shapes(capsys, quiet_dir, shape):
    _run(capsys, quiet_dir, "export", "--model", "tiny_models:tiny", "--input-shape", shape, "--backends", "xnnpack",
         "--weights", "none", "--dry-run", "--out", quiet_dir / "o")


@FUZZ
@given(specs=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map("".join), min_size=1, max_size=3))
def test_backend_specs(capsys, quiet_dir, specs):
    if any(s.startswith("-") for s in specs):
        specs = [s.lstrip("-") or "x" for s in specs]
    _run(capsys, quiet_dir, "export", "--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights", "none",
         "--backends", *specs, "--dry-run", "--out", quiet_dir / "o")


@FUZZ
@given(model=st.one_of(
    st.text(alphabet="abcxyz_.:()'=,0123456789/", min_size=1, max_size=24),
    st.sampled_from(["tiny_models:tiny()", "tiny_models:sized(width=", "tiny_models:nothing", "no.such:thing",
                     "x.onnx", "y.pt2", "z.jit", "w.pt", ":", "tiny_models:", "tiny_models:sized(1, 2, bias=)"]),
))
def test_model_strings(capsys, quiet_dir, model):
    if model.startswith("-"):
        model = "m" + model
    _run(capsys, quiet_dir, "export", "--model", model, "--input-shape", "1,3,16,16", "--weights", "none",
         "--backends", "xnnpack", "--dry-run", "--out", quiet_dir / "o")


KEYS = ["backends", "precision", "out", "weights", "seed", "input-shape", "model", "mobilenet", "timeout", "tolerance",
        "calibration-samples", "bogus", "verify-inputs", "target"]
VALUES = st.one_of(st.integers(-5, 10**20), st.text(max_size=12), st.booleans(), st.floats(allow_nan=True),
                   st.lists(st.sampled_from(WORDS), max_size=3))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v))
    if isinstance(v, list):
        return "[" + ", ".join(json.dumps(x) for x in v) + "]"
    return json.dumps(v) if isinstance(v, str) else str(v)


@FUZZ
@given(table=st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=5))
def test_config_files(capsys, quiet_dir, table):
    config = quiet_dir / "pteforge.toml"
    config.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items()))
    try:
        _run(capsys, quiet_dir, "export", "-c", config, "--dry-run")
    finally:
        config.unlink()


ENTRY = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=8), "modelName": st.text(max_size=8), "category": st.sampled_from(["mobilenet", "yolo", "x", ""]),
    "backend": st.sampled_from(["xnnpack", "coreml", "mlx", 3]), "size": st.one_of(st.integers(), st.text(max_size=3)),
    "sha256": st.text(max_size=4), "status": st.sampled_from(["VERIFIED", "MISMATCH", "??"]), "file": st.text(max_size=10),
})


@FUZZ
@given(doc=st.one_of(
    st.fixed_dictionaries({"schema_version": st.sampled_from([2, 1, "2"]), "models": st.lists(ENTRY, max_size=3)},
                          optional={"version": st.text(max_size=5), "baseUrl": st.text(max_size=10), "labels": st.just([])}),
    st.lists(st.integers(), max_size=2), st.text(max_size=10)))
def test_manifests(capsys, quiet_dir, doc):
    path = quiet_dir / "index.json"
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    try:
        code, said = _run(capsys, quiet_dir, "manifest", "check", path)
    finally:
        path.unlink()
    assert code in (ExitStatus.OK, ExitStatus.MANIFEST), said


@given(st.floats(min_value=0, max_value=1, allow_nan=False))
def test_a_percentage_never_rounds_a_part_up_to_the_whole_or_a_little_down_to_nothing(fraction):
    """99.57 % delegated printed as "100 %" had said the whole model ran in the delegate."""
    from pteforge.core.units import pct

    text = pct(fraction)
    assert (text == "100") == (fraction == 1) and (text == "0") == (fraction == 0), (fraction, text)
    if text != "<0.1":
        assert abs(fraction * 100 - float(text)) <= 0.5 + 1e-9, (fraction, text)


@given(st.floats(min_value=0, max_value=1, allow_nan=False), st.floats(min_value=0.01, max_value=1, allow_nan=False))
def test_a_value_that_misses_its_bound_reads_below_it(fraction, bound):
    """A segmentation's class ids equal eager's in 98.7 % of their values printed as "99 % < 99 %"
    (and an SQNR of 19.97 dB as "20.0 dB < 20 dB"): a miss reads as one."""
    from hypothesis import assume

    from pteforge.core.units import below, pct_below

    assume(fraction < bound and bound * 100 - fraction * 100 > 1e-3)
    text = pct_below(fraction, bound)
    assert text == "<0.1" or float(text) < bound * 100, (fraction, bound, text)
    assert abs(float(text.lstrip("<")) - fraction * 100) <= 0.5 + 1e-9, (fraction, bound, text)
    db = bound * 40
    assume(db - fraction * 40 > 1e-3)
    assert float(below(fraction * 40, db, 1)) < db
