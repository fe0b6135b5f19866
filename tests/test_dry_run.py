"""``--dry-run`` is the run's plan: the same checks before work, and the jobs the run makes."""

import json

import pytest
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus

TINY = ("--input-shape", "1,3,16,16", "--weights", "none", "--bench-runs", "0")
CONFIG = """\
backends = ["xnnpack", "portable", "coreml"]
weights = "none"
bench-runs = 0
out = "{out}"

[[model]]
source = "tiny_models:{factory}"
input-shape = [1, 3, 16, 16]

[[model]]
source = "tiny_models:tiny"
name = "other"
input-shape = [1, 3, 16, 16]
backends = ["xnnpack:int8", "vulkan"]
"""


def planned(capsys, *args) -> set[tuple[str, str]]:
    code, stdout, err = cli(capsys, *args, "--dry-run", "--json")
    assert code == ExitStatus.OK, err
    plan = json.loads(stdout)["plan"]
    jobs = {(m["name"], t) for m in plan["models"] for t in m["targets"]}
    assert plan["jobs"] == len(jobs)
    return jobs


def ran(capsys, out, *args) -> set[tuple[str, str]]:
    code, stdout, err = cli(capsys, *args, "--json")
    assert code in (ExitStatus.OK, ExitStatus.TARGETS_FAILED), err
    index = json.loads((out / "index.json").read_text())
    lists = ("models", "references", "outOfBudget", "notForApp", "failed")
    return {(e["model"], e["target"]) for key in lists for e in index.get(key, [])}


@pytest.mark.slow
def test_the_plan_is_the_runs_jobs_for_a_config_with_model_tables(capsys, tmp_path):
    config = tmp_path / "pteforge.toml"
    config.write_text(CONFIG.format(out=tmp_path / "o", factory="tiny"))
    jobs = planned(capsys, "export", "-c", config)
    # the first model: three backends; the second its own two and the fp32 program its int8 is timed
    # against (coreml and vulkan, fp16, run nowhere here: no fp32 program is lowered beside them)
    assert jobs == {("tiny", "xnnpack"), ("tiny", "portable"), ("tiny", "coreml"), ("other", "xnnpack:int8"),
                    ("other", "vulkan"), ("other", "xnnpack")}
    assert not (tmp_path / "o").exists()
    assert ran(capsys, tmp_path / "o", "export", "-c", config) == jobs
    # again: every job is in the cache, and the plan says so
    code, stdout, _ = cli(capsys, "export", "-c", config, "--dry-run", "--json")
    assert json.loads(stdout)["plan"]["cached"] == 6


@pytest.mark.slow
def test_the_plan_is_the_runs_jobs_for_a_target_run_and_a_catalog_run(capsys, tmp_path):
    target = ("export", "--model", "tiny_models:tiny", *TINY, "--target", "android", "--out", tmp_path / "a")
    assert ran(capsys, tmp_path / "a", *target) == planned(capsys, *target)
    catalog = ("export", "--mobilenet", "--weights", "none", "--bench-runs", "0", "--backends", "xnnpack", "coreml",
               "--out", tmp_path / "c")
    jobs = planned(capsys, *catalog)
    assert len(jobs) == 2 and ran(capsys, tmp_path / "c", *catalog) == jobs


def test_the_plan_refuses_what_the_run_refuses_before_any_work(capsys, tmp_path):
    """A misspelt factory in a [[model]] table is refused by the plan as by the run, with the
    same exit code and nothing written."""
    config = tmp_path / "pteforge.toml"
    config.write_text(CONFIG.format(out=tmp_path / "o", factory="tiyn"))
    for extra in (("--dry-run",), ()):
        code, _, err = cli(capsys, "export", "-c", config, *extra)
        assert code == ExitStatus.MODEL, err
        [line] = error_lines(err)
        assert line.startswith(f"error: {config}:7: ") and "has no callable 'tiyn': did you mean 'tiny'?" in line, line
    assert not (tmp_path / "o").exists()
    code, _, err = cli(capsys, "export", "--model", "tiny_models:tiny", *TINY, "--out", tmp_path / "f", "--dry-run",
                       "--calibration", tmp_path / "none")
    assert code == ExitStatus.USAGE and not (tmp_path / "f").exists()
