"""One answer to "can this program run here": export, validate, bench, select and load_best agree."""

import json

import pytest
from conftest import written

from test_cli import TINY, cli

from pteforge.core.errors import ExitStatus
from pteforge.core.result import Status
from pteforge.backends import program_check

KERNELS_MISSING = "the cortex_m:: kernels are not in this runtime"


@pytest.mark.slow
def test_cortex_m_and_xnnpack_get_one_verdict_everywhere(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = cli(capsys, *TINY, "--backends", "cortex-m", "xnnpack", "--out", out)
    assert code == ExitStatus.OK, err
    entries = {e["target"]: e for e in written(out / "index.json")}
    # this runtime lacks its kernels: proven on their reference implementations instead
    assert entries["cortex-m"]["status"] == "SIMULATED", entries["cortex-m"].get("reason")
    assert "cortex_m:: reference implementations" in entries["cortex-m"]["verification"]["method"]
    assert entries["xnnpack"]["status"] == "VERIFIED"
    assert "cortex_m::quantize_per_tensor.out" in entries["cortex-m"]["delegation"]["kernels"]

    # validate: the same status, and the run is fine (exit 0)
    code, _, err = cli(capsys, "validate", "--models-dir", out)
    assert code == ExitStatus.OK, err
    files = {f["file"]: f for f in json.loads((out / "validation_report.json").read_text())["files"]}
    cortex = files[entries["cortex-m"]["file"]]
    assert cortex["status"] == Status.SIMULATED and "cortex_m:: reference implementations" in cortex["method"]
    assert files[entries["xnnpack"]["file"]]["status"] == Status.VERIFIED

    # bench: not timed here, for the same reason; nothing failed
    from pteforge.app.bench import bench

    results = {r.file.rsplit("/", 1)[-1]: r for r in bench(out, runs=2)}
    assert results["tiny_cortex-m.pte"].status is Status.NOT_RUNNABLE_HERE
    assert KERNELS_MISSING in results["tiny_cortex-m.pte"].reason
    assert "proven on ExecuTorch's cortex_m:: reference implementations at export" in results["tiny_cortex-m.pte"].reason
    assert results["tiny_xnnpack.pte"].status is None and results["tiny_xnnpack.pte"].numbers["p50_ms"] > 0
    code, stdout, _ = cli(capsys, "bench", out, "--runs", "2")
    assert code == ExitStatus.OK and "1 proven on reference simulators at export, which time nothing" in stdout

    # select (child process) and load_best (this process): a Cortex-M program is not offered
    # to the app at all (no build of it links the cortex_m:: kernels: manifest notForApp), so
    # it is no candidate on any platform
    assert [e["target"] for e in json.loads((out / "index.json").read_text())["notForApp"]] == ["cortex-m"]
    code, stdout, _ = cli(capsys, "select", "tiny", "--manifest", out / "index.json", "--platform", "all")
    assert code == ExitStatus.OK
    assert "tiny_cortex-m.pte" not in stdout and "→ tiny_xnnpack.pte" in stdout

    from pteforge.app.selection import load_best

    chosen = load_best(out / "index.json", "tiny", platform="all")
    assert chosen.entry.name == "tiny_xnnpack.pte" and chosen.program is not None and chosen.skipped == []


def test_host_knows_the_kernels_the_wheel_ships():
    from pteforge.runtime.host import Host

    here = Host.here()
    assert "XnnpackBackend" in here.backends and "aten::convolution.out" in here.operators
    assert "quantized_decomposed::quantize_per_tensor.out" in here.operators, "the wheel's quantized kernels are loaded"
    assert program_check(here, ["CoreMLBackend"], []).reason == "CoreMLBackend is not registered in this runtime"
    assert program_check(here, ["CoreMLBackend"], []).fix == "run it on a device: ios, macos"
    assert program_check(here, ["XnnpackBackend"], ["aten::add.out"]).ok


def test_a_backends_own_kernels_are_named_first():
    from pteforge.runtime.host import Host

    here = Host(frozenset(), frozenset())
    check = program_check(here, [], ["aten::add.out", "cortex_m::quantize_per_tensor.out"])
    assert check.reason == "the cortex_m:: kernels are not in this runtime (cortex_m::quantize_per_tensor.out and 1 more)"
    assert "Cortex-M" in check.fix and check.anywhere
    # a kernel no ExecuTorch library has comes first: no device runs that program
    check = program_check(here, [], ["cortex_m::quantize_per_tensor.out", "aten::hardswish.out"])
    assert check.reason.startswith("the program calls aten::hardswish.out, which no ExecuTorch kernel library has")
    assert not check.anywhere and check.not_here.value == "LOAD_FAILED"


def test_outputs_read_in_place_are_the_programs_own_memory_until_its_next_call():
    """``execute_in_place`` gives what ``execute`` gives, without ExecuTorch's copy: the
    tensor is the program's output buffer, which its next call writes again."""
    import torch
    from executorch.exir import to_edge
    from pteforge.runtime.host import execute_in_place, load_runtime

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    program = to_edge(torch.export.export(Double(), (torch.ones(4),))).to_executorch()
    method = load_runtime().load_program(program.buffer).load_method("forward")
    copied = method.execute([torch.arange(4.0)])[0]
    first = execute_in_place(method, [torch.arange(4.0)])[0]
    assert torch.equal(first, copied)
    kept = first.clone()
    execute_in_place(method, [torch.full((4,), 10.0)])
    assert torch.equal(first, torch.full((4,), 20.0)), "the next call wrote the same memory"
    assert torch.equal(kept, torch.arange(4.0) * 2) and torch.equal(copied, kept), "copies keep their values"
