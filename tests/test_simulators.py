"""Proof where this host cannot run a program: the target's reference simulator.

A TOSA or Ethos-U program runs with its delegate payload on Arm's TOSA reference model (for
Ethos-U, the TOSA graph Vela compiled into it), a Cortex-M one with ExecuTorch's
``cortex_m::`` reference implementations; the rest of the program on this host's kernels.
Rows proven so are SIMULATED, never VERIFIED, and a wrong program is still a MISMATCH.
"""

import json
import os
import shutil
import struct

import pytest
from conftest import TESTS, run_cli, run_here, written
from hypothesis import given, settings
from hypothesis import strategies as st

from pteforge.core.result import Status

DOMINANT = f"{TESTS / 'tiny_models.py'}:dominant"
TARGETS = ("tosa", "tosa:fp32", "ethos-u55", "ethos-u85", "cortex-m", "vulkan", "portable")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("simulated") / "out"
    proc = run_cli("export", "--model", DOMINANT, "--input-shape", "1,4", "--backends", *TARGETS,
                   "--out", out, "--bench-runs", "0", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout


def entries(out) -> dict:
    man = json.loads((out / "index.json").read_text())
    return {e["target"]: e for e in written(man) + man["references"]}


def exported_alone(capsys, tmp_path, factory: str, shape: str | tuple[str, ...], *targets: str) -> tuple:
    """tiny_models.py's ``factory`` exported for ``targets`` (default: cortex-m) in this
    process: (its output folder, its rows by target). ``shape``: one input's, or a tuple of each's."""
    out = tmp_path / "out"
    shapes = [flag for one in ((shape,) if isinstance(shape, str) else shape) for flag in ("--input-shape", one)]
    proc = run_here(capsys, "export", "--model", f"{TESTS / 'tiny_models.py'}:{factory}", *shapes,
                    "--backends", *(targets or ("cortex-m",)), "--out", out, "--bench-runs", "0", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, entries(out)


def test_arm_programs_are_proven_on_reference_simulators_and_said_apart(exported):
    out, stdout = exported
    e = entries(out)
    for target in ("tosa", "tosa:fp32", "ethos-u55", "ethos-u85", "cortex-m"):
        v = e[target]["verification"]
        assert e[target]["status"] == "SIMULATED" and v["passed"], (target, e[target]["reason"])
        assert v["sqnr_db"] >= v["threshold_sqnr_db"]
    for target in ("tosa", "tosa:fp32"):
        assert e[target]["verification"]["method"].startswith("Arm's TOSA reference model (tosa-tools ")
        assert "ran the file's TOSABackend payload" in e[target]["verification"]["method"]
    for target in ("ethos-u55", "ethos-u85"):
        method = e[target]["verification"]["method"]
        assert "ran the file's EthosUBackend payload" in method and "the TOSA graph Vela" in method
        assert "Vela's command stream itself runs only on an Ethos-U" in method
        est = e[target]["estimates"]
        assert est["cycles"] > 0 and est["inference_ms"] > 0 and est["sram_kib"] > 0 and est["clock_mhz"] > 0
        assert est["tool"].startswith("Vela ") and "estimate" in est["estimated_by"]
    assert e["ethos-u55"]["estimates"]["accelerator"] != e["ethos-u85"]["estimates"]["accelerator"]
    assert "cortex_m:: reference implementations" in e["cortex-m"]["verification"]["method"]
    assert e["vulkan"]["status"] == "NOT_RUNNABLE_HERE" and e["vulkan"].get("verification") is None
    # the portable program ran on this host's own runtime, and says so
    assert e["portable"]["verification"]["method"].startswith("this host's ExecuTorch runtime (executorch ")
    assert "Successfully exported 7/7 backends: 6 proven (1 on this host, 5 on reference simulators), 1 needs a device" \
        in stdout
    assert "ethos-u55: dominant_ethos-u55.pte" in stdout and "simulated on Arm's TOSA reference model" in stdout
    assert "estimates" in stdout and "not measured" in stdout
    summary = (out / "EXPORT_SUMMARY.md").read_text()
    assert "| SIMULATED | Arm's TOSA reference model" in summary
    html = (out / "report.html").read_text()
    assert "on reference simulators" in html and 'class="badge st-sim">SIMULATED' in html


def _payload(data: bytes) -> tuple[int, bytes]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    payload = bytes(deserialize_pte_binary(data).program.backend_delegate_data[0].data)
    return data.find(payload), payload


def _validate(out, env=None):
    proc = run_cli("validate", out, **({"env": env} if env else {}))
    files = {f["file"].rsplit("/", 1)[-1]: f for f in json.loads((out / "validation_report.json").read_text())["files"]}
    return proc, files


def test_a_weight_flipped_after_lowering_is_a_mismatch_not_simulated(exported, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(exported[0], out)
    int8, fp32 = out / "custom" / "dominant_tosa.pte", out / "custom" / "dominant_tosa_fp32.pte"
    for path, weight, flipped in ((int8, bytes([0x7F, 1, 1, 1, 1, 0x7F]), bytes([0x81])),
                                  (fp32, struct.pack("<4f", 1.0, 0.01, 0.01, 0.01), struct.pack("<f", -1.0))):
        data = path.read_bytes()
        at, payload = _payload(data)
        inside = payload.find(weight)
        assert at >= 0 and inside >= 0, f"{path.name}: the dominant weight is in its TOSA payload"
        path.write_bytes(data[:at + inside] + flipped + data[at + inside + len(flipped):])
    proc, files = _validate(out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name in ("dominant_tosa.pte", "dominant_tosa_fp32.pte"):
        assert files[name]["status"] == "MISMATCH", files[name]
        assert "differs from eager on the export's 4 seeded inputs: SQNR" in files[name]["reason"]
    # the files left alone are proven as before
    assert files["dominant_ethos-u55.pte"]["status"] == "NOT_RUNNABLE_HERE", "its export kept Vela's TOSA graph in another cache"
    assert "simulated at export" in files["dominant_ethos-u55.pte"]["reason"]
    assert files["dominant_cortex-m.pte"]["status"] == "SIMULATED"
    assert files["dominant_portable.pte"]["status"] == "VERIFIED"


@pytest.mark.slow  # over 20 s: the fast subset stays under 10 minutes
def test_validate_proves_an_ethos_u_file_as_its_export_did_with_the_graph_vela_compiled(tmp_path):
    """The export keeps the TOSA graph behind each Vela command stream in the user cache, by
    the stream's sha256: validate on this machine runs the file as the export did and gives
    the same status; with another cache it cannot know the graph, and says so."""
    out = tmp_path / "out"
    proc = run_cli("export", "--model", DOMINANT, "--input-shape", "1,4", "--backends", "ethos-u85", "--out", out,
                   "--bench-runs", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert entries(out)["ethos-u85"]["status"] == "SIMULATED"
    proc, files = _validate(out)
    row = files["dominant_ethos-u85.pte"]
    assert proc.returncode == 0 and row["status"] == "SIMULATED", row
    assert row["simulator"] == entries(out)["ethos-u85"]["verification"]["simulator"]
    proc, files = _validate(out, env={**os.environ, "PTEFORGE_CACHE_DIR": str(tmp_path / "elsewhere"),
                                      "PYTHONPATH": str(TESTS)})
    row = files["dominant_ethos-u85.pte"]
    assert row["status"] == "NOT_RUNNABLE_HERE" and "simulated at export (SIMULATED)" in row["reason"], row


def test_a_damaged_tosa_payload_fails_its_row_in_one_line(exported, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(exported[0], out)
    path = out / "custom" / "dominant_tosa.pte"
    data = path.read_bytes()
    at, payload = _payload(data)
    path.write_bytes(data[:at] + b"\xff" * 8 + data[at + 8:])  # the flatbuffer's root offset and identifier
    proc, files = _validate(out)
    assert proc.returncode == 1
    row = files["dominant_tosa.pte"]
    assert row["status"] == "RUN_FAILED" and "\n" not in row["reason"], row
    assert "TOSA" in row["reason"] and "damaged" in row["reason"] or "TOSA reference model" in row["reason"], row
    assert files["dominant_tosa_fp32.pte"]["status"] == "SIMULATED" and files["dominant_portable.pte"]["status"] == "VERIFIED"


SHIMS = {
    "missing": ("raise ImportError('libtosa_reference_model.so: cannot open shared object file')",
                "Arm's TOSA reference model cannot be imported (libtosa_reference_model.so"),
    "invalid": ("import enum\nclass GraphStatus(enum.Enum):\n    TOSA_VALID = 0\n    TOSA_UNPREDICTABLE = 1\n"
                "def run(graph, inputs, **kw):\n    return [], GraphStatus.TOSA_UNPREDICTABLE\n",
                "the TOSA reference model found the graph TOSA_UNPREDICTABLE"),
    "crash": ("import enum, os, signal\nclass GraphStatus(enum.Enum):\n    TOSA_VALID = 0\n"
              "def run(graph, inputs, **kw):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
              "killed by SIGSEGV"),
}


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(SHIMS))
def test_a_broken_reference_model_fails_only_the_rows_that_need_it(exported, tmp_path, how):
    shim = tmp_path / "shim" / "tosa_reference_model"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(SHIMS[how][0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc, files = _validate(exported[0], env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for name in ("dominant_tosa.pte", "dominant_tosa_fp32.pte"):
        assert files[name]["status"] == "RUN_FAILED" and SHIMS[how][1] in files[name]["reason"], files[name]
        assert "\n" not in files[name]["reason"]
    # nothing else is lost: this host's runtime and the Cortex-M simulation need no TOSA model
    assert files["dominant_portable.pte"]["status"] == "VERIFIED"
    assert files["dominant_cortex-m.pte"]["status"] == "SIMULATED"
    assert "Traceback" not in proc.stdout + proc.stderr


def test_status_counts_keep_host_and_simulator_apart():
    from pteforge.core.result import proof_counts

    class Row:
        def __init__(self, status):
            self.status = status

    rows = [Row(Status.VERIFIED)] * 3 + [Row(Status.SIMULATED)] * 4 + [Row(Status.NOT_RUNNABLE_HERE)] * 3
    assert proof_counts(rows) == "7 proven (3 on this host, 4 on reference simulators), 3 need a device"
    assert proof_counts([Row(Status.SIMULATED)]) == "1 proven on a reference simulator"
    assert Status.SIMULATED.ok and Status.SIMULATED.proven and Status.SIMULATED.exported


def test_where_int8_breaks_is_named_by_eager_module(capsys, tmp_path):
    """A net that int8 breaks at one known layer: the row misses its budget, the summary says
    where (the eager module), --accuracy-report lists the worst layers and what to try, and
    report.html shows them."""
    out = tmp_path / "out"
    proc = run_here(capsys, "export", "--model", f"{TESTS / 'tiny_models.py'}:breaks_int8", "--input-shape", "1,3,16,16",
                            "--backends", "xnnpack:int8", "tosa", "--out", out, "--bench-runs", "0", "--no-cache",
                            "--accuracy-report")
    man = json.loads((out / "index.json").read_text())
    rows = {e["target"]: e for e in written(man) + man.get("failed", [])}
    for target in ("xnnpack:int8", "tosa"):
        acc = rows[target]["accuracy"]
        assert acc["worst"][0]["module"] == "spread", (target, acc["worst"])
        assert acc["worst"][0]["drop_db"] > 10 and acc["layers"] >= 4
        assert any("leave spread (Spread) in fp32" in t for t in acc["try"])
    assert "misses its accuracy budget (SQNR" in proc.stdout and "loses most at spread (Spread" in proc.stdout
    assert "the layers that lose most against fp32" in proc.stdout, "--accuracy-report's table"
    html = (out / "report.html").read_text()
    assert 'id="accuracy"' in html and "misses its budget" in html and "<td>spread</td>" in html
    # the fp32 references are not quantized: nothing to break
    assert all("accuracy" not in e for e in man["references"])


def test_in_place_arithmetic_with_scalars_is_quantized_for_cortex_m(capsys, tmp_path):
    """``y.mul_(0.5)``: Cortex-M's passes make a scalar a tensor for ``mul`` and not for
    ``mul_``, whose int8 form then lacked its second input's parameters (LOWER_FAILED:
    "AtenToCortexMPass failed: KeyError: 1"). It is rewritten as ``mul`` first, as Arm's
    own quantizers do."""
    _, found = exported_alone(capsys, tmp_path, "scaled_in_place", "1,3,8,8", "cortex-m", "tosa")
    assert {e["status"] for e in found.values()} == {"SIMULATED"}, found
    assert all(e["verification"]["sqnr_db"] > 30 for e in found.values()), found


def test_a_constant_where_a_mask_is_off_is_filled_in_its_quantization_on_cortex_m(capsys, tmp_path):
    """``torch.where(mask, y, torch.zeros_like(y))``: Cortex-M's passes folded the quantize
    after the zeros into the fill and left its value 0 where zero is the zero point (8): the
    masked values came out -0.11, not 0 (14.6 dB on a tiny classifier, 38.3 dB on TOSA); a
    ``torch.full(size, -0.25)`` stayed float32 and the program failed. Each fill is its value
    quantized now, and the program gives what TOSA's and XNNPACK's int8 give."""
    _, found = exported_alone(capsys, tmp_path, "masked_fill", ("4,8", "bool:4,8"), "cortex-m", "tosa", "xnnpack:int8")
    assert found["cortex-m"]["status"] == "SIMULATED", found["cortex-m"].get("reason")
    sqnr = {target: e["verification"]["sqnr_db"] for target, e in found.items()}
    assert sqnr["cortex-m"] > 20 and abs(sqnr["cortex-m"] - sqnr["tosa"]) < 1, sqnr


def test_a_linear_read_by_a_batch_matmul_lowers_on_cortex_m(capsys, tmp_path):
    """``torch.bmm(self.q(x), x.transpose(1, 2))``: folded, the quantized linear was retraced
    as int32 (its int32 bias) beside the int8 keys, and Cortex-M's next pass failed
    ("expected scalar type torch.int32 but found torch.int8"): LOWER_FAILED. The linear is
    Cortex-M's own int8 op at once now, and the program gives what XNNPACK's int8 gives."""
    _, found = exported_alone(capsys, tmp_path, "projected_query", "1,8,16", "cortex-m", "xnnpack:int8")
    assert found["cortex-m"]["status"] == "SIMULATED", found["cortex-m"].get("reason")
    assert {"cortex_m::quantized_linear.out", "cortex_m::quantized_batch_matmul.out"} <= set(
        found["cortex-m"]["delegation"]["kernels"]), found["cortex-m"]["delegation"]["kernels"]
    assert found["cortex-m"]["verification"]["sqnr_db"] > 20, found["cortex-m"]["verification"]


def test_complex_values_beside_the_npu_are_simulated(capsys, tmp_path):
    """An FFT's complex values, computed on the CPU between the int8 parts: the simulation
    took no complex tensor ("ScalarType 9"), and the rows were RUN_FAILED."""
    _, found = exported_alone(capsys, tmp_path, "spectrum", "2,16", "tosa", "cortex-m")
    for target in ("tosa", "cortex-m"):
        assert found[target]["status"] == "SIMULATED", (target, found[target].get("reason"))
        assert "aten::_fft_r2c.out" in found[target]["delegation"]["kernels"]


def test_cortex_m_hardswish_computes_on_floats_not_int8(capsys, tmp_path):
    """The reference simulation found ExecuTorch's Cortex-M passes leaving hardswish on int8
    values after a batch-normed convolution; pteforge gives it floats (dequantize, quantize),
    written out in operators a device's runtime has kernels for."""
    _, found = exported_alone(capsys, tmp_path, "hardswish_net", "1,3,16,16")
    e = found["cortex-m"]
    assert e["status"] == "SIMULATED", e.get("reason")
    # on floats, in operators every runtime has a kernel for: ExecuTorch 1.5.1 has no aten::hardswish.out
    from pteforge.core.kernels import portable_kernels

    kernels = e["delegation"]["kernels"]
    assert {"aten::add.Scalar_out", "aten::clamp.out", "aten::div.Scalar_out"} <= set(kernels), kernels
    assert all(k in portable_kernels() or k.startswith("cortex_m::") for k in kernels), kernels


def test_every_cortex_m_convolution_is_int8_and_the_caller_keeps_nchw(capsys, tmp_path):
    """The Cortex-M quantizer takes only channels-last convolutions: pteforge lays the
    activations out NHWC inside the program, weights too (a model's own .contiguous() gave the
    next convolution NCHW input), so none stays on fp32 ``aten::convolution``. The file's
    inputs and outputs keep the capture's NCHW order."""
    out, found = exported_alone(capsys, tmp_path, "shuffled", "1,3,16,16")
    e = found["cortex-m"]
    assert e["status"] == "SIMULATED", e.get("reason")
    kernels = e["delegation"]["kernels"]
    assert "cortex_m::quantized_conv2d.out" in kernels and "aten::convolution.out" not in kernels, kernels
    from pteforge.backends.toolkit.simulate import deserialize

    plan = deserialize((out / e["file"]).read_bytes()).execution_plan[0]
    [x] = [plan.values[i].val for i in plan.inputs]
    assert list(x.sizes) == [1, 3, 16, 16] and list(x.dim_order) == [0, 1, 2, 3], "the caller's NCHW tensor"


def test_a_one_channel_nhwc_tensor_gets_a_dim_order_its_kernels_take(capsys, tmp_path):
    """A pixel shuffle to one channel in NHWC: strides (4096, 1, 64, 1) fit several dim orders,
    and ExecuTorch read (0, 2, 1, 3), which the ``_clone_dim_order`` that made the tensor
    refused (the simulation runs dim-order copies with the orders the file gives them)."""
    e = exported_alone(capsys, tmp_path, "one_channel_upsampler", "1,3,32,32")[1]["cortex-m"]
    assert e["status"] == "SIMULATED" and e["verification"]["sqnr_db"] > 30, (e.get("reason"), e.get("verification"))


@pytest.mark.slow  # over 20 s: the fast subset stays under 10 minutes
def test_an_attention_block_is_proven_on_every_arm_simulator(capsys, tmp_path):
    """A small vision transformer (layer norm, attention, GELU, a softmax head) on the Arm
    targets. It failed two ways: the TOSA ones on a value a re-trace reused from the capture's
    fake mode (``full``, a call reading no tensor: patch ``retraces_reuse_values``), and
    Cortex-M on a dequantize put before ``cortex_m::softmax``, which takes int8
    (``floats_on_quantized_values`` took it for ATen's softmax)."""
    e = exported_alone(capsys, tmp_path, "attention_block", "1,3,32,32", "tosa", "ethos-u85", "cortex-m")[1]
    for target in ("tosa", "ethos-u85", "cortex-m"):
        assert e[target]["status"] == "SIMULATED", (target, e[target].get("reason"))
        assert e[target]["verification"]["sqnr_db"] > 25, (target, e[target]["verification"])
    assert "cortex_m::softmax.out" in e["cortex-m"]["delegation"]["kernels"], "the int8 softmax CMSIS-NN has"


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["relu_beside_conv", "unetish"])
def test_a_fused_relu_whose_range_reaches_below_zero_still_clamps(capsys, tmp_path, factory):
    """A ReLU whose output shares its quantization with a plain convolution's (ShuffleNet V2's
    chunk and cat; a U-Net's skip join after a transposed convolution): ExecuTorch fused it
    into the convolution before it by narrowing a range that its TOSA rescale then ignored
    (TOSA 0.9 and 8.3 dB from eager), and Cortex-M refused to fuse it, leaving that convolution
    an ``aten.convolution`` on int8 values (-8.4 and -2.7 dB). Patched
    (``fused_activations_clamp_in_tosa``, ``activations_fuse_into_a_wider_range``), each is as
    close to eager as the quantized program in PyTorch (36.5 and 36.8 dB)."""
    e = exported_alone(capsys, tmp_path, factory, "1,3,16,16", "tosa", "cortex-m")[1]
    for target in ("tosa", "cortex-m"):
        assert e[target]["status"] == "SIMULATED", (target, e[target].get("reason"))
        assert e[target]["verification"]["sqnr_db"] > 30, (target, e[target]["verification"])
    assert "aten::convolution.out" not in e["cortex-m"]["delegation"]["kernels"], "every convolution int8"


def test_a_partition_ends_on_its_quantized_values(capsys, tmp_path):
    """Arm's partitioner put a quantize in the partition that reads it and then took it out
    (its input was outside): the partition before it ended on a value the graph calls float
    and its TOSA graph makes int8, which the CPU quantized again (-2.0 dB on TOSA where the
    quantized program in PyTorch is 34.8 dB). Patched (``boundary_quantizes_join_their_producer``),
    the quantize is the producing partition's, and TOSA and Ethos-U give what PyTorch's int8 gives."""
    e = exported_alone(capsys, tmp_path, "relu6_beside_split", "1,3,12,12", "tosa", "ethos-u55", "cortex-m")[1]
    for target in ("tosa", "ethos-u55", "cortex-m"):
        assert e[target]["status"] == "SIMULATED", (target, e[target].get("reason"))
    assert abs(e["tosa"]["verification"]["sqnr_db"] - e["cortex-m"]["verification"]["sqnr_db"]) < 2, e


def test_the_cortex_m_mend_leaves_other_graphs_alone():
    from pteforge.backends.cortex_m import FLOAT_MATH, floats_on_quantized_values

    class Program:  # an edge program's graph with no floating-point op on int8 values
        import torch

        graph_module = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))

    assert floats_on_quantized_values(Program) == 0 and "hardswish" in FLOAT_MATH


def test_lists_of_tensors_are_carried_out(capsys, tmp_path):
    """split's out argument is a list of tensors: the simulation writes each of them, on this
    host's kernels (Cortex-M) and around a TOSA payload alike."""
    e = exported_alone(capsys, tmp_path, "splits", "1,3,16,16", "cortex-m", "tosa:fp32")[1]
    for target in ("cortex-m", "tosa:fp32"):
        assert e[target]["status"] == "SIMULATED", (target, e[target].get("reason"))
        assert e[target]["verification"]["sqnr_db"] > 20


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_simulations_cmsis_convolutions_are_executorchs_reference_value_for_value(data):
    """pteforge's convolutions for the Cortex-M simulation (all channels requantized at once)
    give ExecuTorch's reference implementations' integers, whatever the shapes, strides,
    offsets and shifts (left and right)."""
    import torch

    from pteforge.backends.toolkit import cmsis
    from pteforge.backends.toolkit.simulate import _reference_kernels

    _reference_kernels()
    draw = data.draw
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    depthwise = draw(st.booleans())
    cin = draw(st.integers(1, 6))
    cout = cin * draw(st.integers(1, 2)) if depthwise else draw(st.integers(1, 6))
    k, stride, pad, dil = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(0, 2)), draw(st.integers(1, 2))
    size = draw(st.integers(max(dil * (k - 1) + 1 - 2 * pad, 1), 9))
    x = torch.randint(-128, 128, (1, cin, size, size), generator=g, dtype=torch.int8).to(memory_format=torch.channels_last)
    weight_shape = (1, k, k, cout) if depthwise else (cout, k, k, cin)
    weight = torch.randint(-127, 128, weight_shape, generator=g, dtype=torch.int8)
    bias = draw(st.sampled_from([None, torch.randint(-5000, 5000, (cout,), generator=g, dtype=torch.int32)]))
    multipliers = torch.randint(2**29, 2**31 - 1, (cout,), generator=g, dtype=torch.int32)
    shifts = torch.randint(-12, 3, (cout,), generator=g, dtype=torch.int32)
    offsets = (draw(st.integers(-127, 128)), draw(st.integers(-128, 127)))
    clamp = sorted((draw(st.integers(-128, 127)), draw(st.integers(-128, 127))))
    geometry = ([stride, stride], [pad, pad], [dil, dil])
    if depthwise:
        args = (x, weight, bias, *geometry, cout // cin, *offsets, multipliers, shifts, *clamp, torch.empty(0))
        ours, reference = cmsis.quantized_depthwise_conv2d, torch.ops.cortex_m.quantized_depthwise_conv2d
    else:
        args = (x, weight, bias, *geometry, *offsets, multipliers, shifts, *clamp, torch.empty(0))
        ours, reference = cmsis.quantized_conv2d, torch.ops.cortex_m.quantized_conv2d
    got = ours(*args)
    if dil > 1:  # PyTorch has no dilated convolution of int32 tensors, which the reference convolves:
        with pytest.raises(NotImplementedError, match="slow_conv_dilated"):
            reference(*args)
        # the same convolution with the kernel's taps spread apart by zeros, undilated
        spread = torch.zeros(weight.shape[0], dil * (k - 1) + 1, dil * (k - 1) + 1, weight.shape[3], dtype=torch.int8)
        spread[:, ::dil, ::dil, :] = weight
        args = (x, spread, bias, [stride, stride], [pad, pad], [1, 1], *args[6:])
    expected = reference(*args)
    assert got.dtype == expected.dtype == torch.int8 and got.stride() == expected.stride()
    assert torch.equal(got, expected)


def test_channels_last_inside_lays_out_4d_weights_and_leaves_5d_ones():
    """Cortex-M's NHWC preparation makes 4-D weights channels-last; a 5-D one (a 3-D
    convolution's) has no such layout, and Module.to(memory_format=...) raised on it."""
    import torch

    from pteforge.backends.cortex_m import channels_last_inside

    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.video = torch.nn.Conv3d(1, 1, 1)

        def forward(self, x):
            return self.conv(x) + self.video(x[:, :1].unsqueeze(1)).squeeze(1)

    x = (torch.randn(1, 3, 8, 8),)
    model = Mixed().eval()
    prepared = channels_last_inside(torch.export.export(model, x).module(check_guards=False), x)
    weights = {k: v for k, v in prepared.state_dict().items() if v.dim() >= 4}
    assert weights["conv.weight"].is_contiguous(memory_format=torch.channels_last)
    assert weights["video.weight"].dim() == 5
    assert torch.allclose(prepared(*x), model(*x), atol=1e-6), "the same function"


def test_a_weight_applied_with_matmul_quantizes_for_cortex_m(capsys, tmp_path):
    """ExecuTorch 1.5.1's Cortex-M ``MatmulToBmmPass`` asked a constant for a fake value it
    has not: every model with ``x @ self.w`` failed to quantize (patch
    ``matmuls_of_constants_left_alone``)."""
    _, e = exported_alone(capsys, tmp_path, "own_matmul", "1,8")
    row = e["cortex-m"]
    assert row["status"] == "SIMULATED" and row["verification"]["runtime_precision"] == "int8", row.get("reason")
