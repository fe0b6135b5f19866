"""ONNX's own conformance cases (the node tests in the onnx wheel) through the path a user's
``--model file.onnx`` takes: onnx2torch with pteforge's converters, torch.export, XNNPACK
fp32 lowering and ExecuTorch's runtime, compared with each case's expected outputs at ONNX's
backend test tolerance. ``bench/onnx_conformance.py`` runs every case of the operators real
models use; these are a handful of what onnx2torch alone could not import."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "onnx_conformance.py"


def _bench():
    spec = importlib.util.spec_from_file_location("onnx_conformance", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conformance = _bench()


@pytest.mark.parametrize("case", [
    "test_gru_defaults",  # GRU (opset 22), linear_before_reset 0: its steps unrolled
    "test_gru_with_initial_bias",
    "test_constant_pad_axes",  # Pad-25 read as Pad-18, with axes
    "test_attention_4d_gqa_causal",  # Attention-23: grouped key/value heads, causal
    "test_layer_normalization_3d_axis1_epsilon",  # an axis other than the last
    "test_resize_downsample_sizes_linear_pytorch_half_pixel",  # Resize by sizes
    "test_convtranspose_autopad_same",  # ConvTranspose with auto_pad SAME_UPPER
    "test_ai_onnx_ml_array_feature_extractor",  # domain ai.onnx.ml: an MLP's class label (scikit-learn)
    "test_ai_onnx_ml_binarizer",
])
def test_a_conformance_case_through_pteforge_gives_its_expected_outputs(case, tmp_path):
    model, feeds, expected = conformance.prepared(str(conformance.node_tests() / case))
    assert conformance.pteforge_outcome(model, feeds, expected, "all", tmp_path) is None


def test_the_comparison_fails_on_a_wrong_value_shape_or_dtype():
    expected = [np.array([1.0, 2.0], dtype=np.float32)]
    assert conformance.agrees(expected, [np.array([1.0, 2.0], dtype=np.float32)]) is None
    assert "1 of 2 values off" in conformance.agrees(expected, [np.array([1.0, 2.01], dtype=np.float32)])
    assert "shape" in conformance.agrees(expected, [np.array([[1.0, 2.0]], dtype=np.float32)])
    assert "int64" in conformance.agrees(expected, [np.array([1, 2])])


def slice_opset9(path):
    """A Slice of ONNX opset 9 (its bounds as attributes, Slice-1), as torch 1.x exporters wrote it."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, 2], axes=[1, 2])
    graph = helper.make_graph([node], "slice9", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)]), str(path))
    return path


def test_a_slice_of_opset_9_is_imported_as_slice_1(tmp_path):
    import onnx

    x = np.arange(20, dtype=np.float32).reshape(1, 4, 5)
    model = onnx.load(str(slice_opset9(tmp_path / "slice9.onnx")))
    assert conformance.pteforge_outcome(model, {"x": x}, [x[:, 1:3, 0:2]], "all", tmp_path) is None


def test_a_newer_version_is_read_as_an_older_one_only_where_it_means_the_same():
    import onnx.defs

    from pteforge.models.onnx.converters import added

    def schema(op, version):
        return onnx.defs.get_schema(op, version, "")

    attributes, inputs = added(schema("Resize", 19), schema("Resize", 13))
    assert attributes["antialias"] == 0 and attributes["keep_aspect_ratio_policy"] == b"stretch" and inputs == 4
    assert added(schema("Conv", 22), schema("Conv", 11)) == ({}, 3)  # types only
    assert added(schema("Softmax", 13), schema("Softmax", 11)) is None  # one axis, not the 2-D coerced input
    assert added(schema("ReduceMean", 18), schema("ReduceMean", 13)) is None  # axes moved to an input


def test_a_gather_by_constant_indices_is_captured_without_reading_them_when_it_runs(tmp_path):
    """Gather with the file's constant indices: one index (``x[:, -1]``, the last step of
    torch.onnx's GRU outputs: onnx2torch reads it with .item(), which torch.export refused as
    data-dependent) and a 2-D block of them, negative ones among them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    last = numpy_helper.from_array(np.array(-1, dtype=np.int64), "last")
    block = numpy_helper.from_array(np.array([[0, -1], [2, 1]], dtype=np.int64), "block")
    nodes = [helper.make_node("Gather", ["x", "last"], ["y"], axis=1),
             helper.make_node("Gather", ["x", "block"], ["z"], axis=0)]
    graph = helper.make_graph(nodes, "gathers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 2, 5, 4])], [last, block])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal((3, 5, 4)).astype(np.float32)
    expected = [x[:, -1], np.take(x, [[0, -1], [2, 1]], axis=0)]
    assert conformance.pteforge_outcome(onnx.shape_inference.infer_shapes(model), {"x": x}, expected, "all",
                                        tmp_path) is None


@pytest.mark.parametrize("pads, auto", [([0, 0, 1, 1], "NOTSET"), ([1, 0, 0, 2], "NOTSET"), (None, "SAME_LOWER")])
def test_a_transposed_convolution_padded_unevenly_computes_what_onnx_runtime_does(pads, auto, tmp_path):
    """Keras's ``Conv2DTranspose(strides=2, padding="same")`` through tf2onnx pads 0 before
    and 1 after: onnx2torch refused it ("non symmetrical padding")."""
    import onnx
    import onnxruntime
    import torch
    from onnx import TensorProto, helper, numpy_helper

    from pteforge.models.onnx.build import build_onnx_named
    from pteforge.models.onnx.spec import onnx_spec

    rng = np.random.default_rng(3)
    attrs = {"strides": [2, 2], "kernel_shape": [3, 3], "auto_pad": auto, **({"pads": pads} if pads else {})}
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(rng.normal(size=(2, 3, 3, 3)).astype(np.float32), "w"),
                                           numpy_helper.from_array(rng.normal(size=3).astype(np.float32), "b")])
    path = tmp_path / "t.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = rng.normal(size=(1, 2, 5, 4)).astype(np.float32)
    expected, = onnxruntime.InferenceSession(str(path)).run(None, {"x": x})
    actual = build_onnx_named(onnx_spec(str(path)), "pretrained", 0)(torch.from_numpy(x))["y"].detach().numpy()
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, domain, said", [
    ("Erfc", "", "Erfc at node n is no ONNX operator"),
    ("FusedConv", "com.microsoft", "FusedConv at node n is ONNX Runtime's own operator"),
])
def test_an_operator_onnx_does_not_define_is_said_to_make_the_file_invalid(op, domain, said, capsys, tmp_path):
    """tf2onnx wrote Keras's exact GELU with ``Erfc``, which ONNX does not define (ONNX
    Runtime refuses the file); ONNX Runtime's optimizer writes its own fused operators
    (``FusedConv``, ``QuickGelu``) into a file it saves: not converters pteforge lacks, but
    files to export again."""
    import onnx
    from onnx import TensorProto, helper
    from test_cli import cli, error_lines

    from pteforge.core.errors import ExitStatus

    node = helper.make_node(op, ["x"], ["y"], name="n", domain=domain)
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "odd.onnx"
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    onnx.save(helper.make_model(graph, opset_imports=opsets), str(path))
    code, _, err = cli(capsys, "export", "--model", path, "--backends", "portable", "--out", tmp_path / "out")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert said in line and "export" in line.split("fix:")[1], line
