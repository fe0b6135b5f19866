"""ONNX files of classic machine-learning models (domain ``ai.onnx.ml``, as scikit-learn's
converter writes them): each operator pteforge converts computes what ONNX Runtime computes
on the file, a pipeline exports and is verified against ONNX Runtime, and what no program
can return (ZipMap's dictionaries, a tree ensemble) fails in one line naming what to do."""

import json

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus
from pteforge.models.onnx.build import build_onnx_named
from pteforge.models.onnx.spec import onnx_spec

ML = "ai.onnx.ml"
FEATURES, N = 5, 3


def _model(path, nodes, outputs, initializers=(), name="X"):
    graph = helper.make_graph(nodes, "sklearn", [helper.make_tensor_value_info(name, TensorProto.FLOAT, [N, FEATURES])],
                              outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _classifier(rows, classes, post, labels=True):
    rng = np.random.default_rng(rows * 10 + classes)
    attrs = dict(coefficients=rng.normal(size=rows * FEATURES).tolist(), intercepts=rng.normal(size=rows).tolist(),
                 post_transform=post)
    if labels:
        attrs["classlabels_ints"] = [3 * c + 1 for c in range(classes)]
    return helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain=ML, **attrs)


def _outputs(scores: int, label=TensorProto.INT64):
    return [helper.make_tensor_value_info("label", label, [N]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [N, scores])]


CASES = {
    "three classes, softmax": ([_classifier(3, 3, "SOFTMAX")], _outputs(3)),
    "two classes from one score, logistic": ([_classifier(1, 2, "LOGISTIC")], _outputs(2)),
    "two classes from one score, raw": ([_classifier(1, 2, "NONE")], _outputs(2)),
    "four classes, softmax zero": ([_classifier(4, 4, "SOFTMAX_ZERO")], _outputs(4)),
    "three classes, probit": ([_classifier(3, 3, "PROBIT")], _outputs(3)),
    "one score, no labels": ([_classifier(1, 2, "LOGISTIC", labels=False)], _outputs(1)),
    "one score, probit": ([_classifier(1, 2, "PROBIT", labels=False)], _outputs(1)),
    "two classes from one score, softmax": ([_classifier(1, 2, "SOFTMAX")], _outputs(2)),
    "scaler, normalizer, regressor": (
        [helper.make_node("Scaler", ["X"], ["s"], domain=ML, offset=[0.5] * FEATURES, scale=[2.0, 1, 1, 3, 0.5]),
         helper.make_node("Normalizer", ["s"], ["n"], domain=ML, norm="L2"),
         helper.make_node("Binarizer", ["n"], ["b"], domain=ML, threshold=0.1),
         helper.make_node("LinearRegressor", ["n"], ["y"], domain=ML, targets=2,
                          coefficients=np.linspace(-1, 1, 2 * FEATURES).tolist(), intercepts=[0.25, -1.0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, 2]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [N, FEATURES])]),
    "max and l1 norms": (
        [helper.make_node("Normalizer", ["X"], ["m"], domain=ML, norm="MAX"),
         helper.make_node("Normalizer", ["X"], ["l1"], domain=ML, norm="L1")],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [N, FEATURES]) for name in ("m", "l1")]),
    "a network's label: argmax, then its class": (
        [helper.make_node("ArgMax", ["X"], ["best"], axis=1),
         helper.make_node("ArrayFeatureExtractor", ["classes", "best"], ["label"], domain=ML)],
        [helper.make_tensor_value_info("label", TensorProto.INT64, [1, N])],
        [helper.make_tensor("classes", TensorProto.INT64, [FEATURES], [7, 3, 9, 1, 4])]),
}


@pytest.mark.parametrize("case", CASES)
def test_each_operator_computes_what_onnx_runtime_does_on_the_file(case, tmp_path):
    path = _model(tmp_path / "m.onnx", *CASES[case])
    x = np.random.default_rng(1).normal(size=(N, FEATURES)).astype(np.float32)
    x[0, :2] = 0.0  # zero scores and features: SOFTMAX_ZERO's and the norms' edge
    expected = onnxruntime.InferenceSession(str(path)).run(None, {"X": x})
    spec = onnx_spec(str(path))
    actual = build_onnx_named(spec, "pretrained", 0)(torch.from_numpy(x))
    assert len(actual) == len(expected)
    for got, want in zip(actual.values(), expected):
        got = got.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, (case, got.dtype, got.shape, want.shape)
        # probit's erfinv (ONNX Runtime's closed form, in float32) subtracts two numbers near 4.3
        # whose difference is ~4e-3 near p = 0.5: one ulp of a score (another CPU's summation
        # order) moves it by ~1e-4 of itself, on either side
        rtol = 1e-3 if "probit" in case else 1e-5
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6, err_msg=case)


def test_a_pipeline_file_exports_and_is_verified_against_onnx_runtime(capsys, tmp_path):
    """Scaler → Normalizer → a three-class LinearClassifier, as skl2onnx writes
    ``make_pipeline(StandardScaler(), Normalizer(), LogisticRegression())`` with
    ``zipmap: False``: its label (int64) and probabilities are the program's outputs."""
    nodes = [helper.make_node("Scaler", ["X"], ["s"], domain=ML, offset=[0.1] * FEATURES, scale=[1.5] * FEATURES),
             helper.make_node("Normalizer", ["s"], ["n"], domain=ML, norm="L2"),
             _classifier(3, 3, "SOFTMAX")]
    nodes[2].input[0] = "n"
    path = _model(tmp_path / "pipeline.onnx", nodes, _outputs(3))
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", path, "--backends", "xnnpack", "portable", "--out", out,
                            "--bench-runs", "0")
    assert code == ExitStatus.OK, stdout + err
    entries = json.loads((out / "index.json").read_text())["models"]
    assert {e["status"] for e in entries} == {"VERIFIED"}, [(e["target"], e["status"], e.get("reason")) for e in entries]
    e = entries[0]
    assert [(o["name"], o["dtype"]) for o in e["outputs"]] == [("label", "int64"), ("scores", "float32")], e
    assert [i["name"] for i in e["inputs"]] == ["X"], "the file's name, not torch.export's lower-cased one"


def test_an_input_name_no_python_argument_can_have_is_given_as_the_file_wrote_it(capsys, tmp_path):
    """TensorFlow's converters name inputs ``serving_default_x:0``; the import's forward()
    cannot (``serving_default_x_0``). The manifest names the input as the file does, and
    ``--input-shape`` takes that name."""
    name = "serving_default_x:0"
    path = _model(tmp_path / "tf.onnx", [helper.make_node("Scaler", [name], ["scores"], domain=ML, offset=[0.1] * FEATURES,
                                                          scale=[1.5] * FEATURES)],
                  [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [N, FEATURES])], name=name)
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", path, "--input-shape", f"{name}={N},{FEATURES}", "--backends",
                            "portable", "xnnpack:int8", "--out", out, "--bench-runs", "0")
    assert code == ExitStatus.OK, stdout + err
    for e in json.loads((out / "index.json").read_text())["models"]:
        assert e["inputs"] == [{"name": name, "shape": [N, FEATURES], "dtype": "float32"}], (e["target"], e["inputs"])


@pytest.mark.parametrize("op, fix", [("ZipMap", "'zipmap': False"), ("TreeEnsembleClassifier", "MLPClassifier"),
                                     ("text labels", "LabelEncoder")])
def test_what_no_program_returns_fails_in_one_line_naming_what_to_do(op, fix, capsys, tmp_path):
    """Before any work: ZipMap's output (a list of dictionaries) is refused with the spec's
    outputs, a tree ensemble by its operator, text labels by their output's type."""
    if op == "ZipMap":
        nodes = [_classifier(3, 3, "SOFTMAX"),
                 helper.make_node("ZipMap", ["scores"], ["probabilities"], domain=ML, classlabels_int64s=[1, 4, 7])]
        outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, [N]),
                   helper.make_value_info("probabilities", helper.make_sequence_type_proto(
                       helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))]
    elif op == "text labels":
        nodes = [_classifier(3, 3, "SOFTMAX", labels=False)]
        nodes[0].attribute.extend([helper.make_attribute("classlabels_strings", ["cat", "dog", "bird"])])
        outputs = _outputs(3, label=TensorProto.STRING)
    else:
        nodes = [helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain=ML,
                                  classlabels_int64s=[0, 1], nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2],
                                  nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF",
                                                                                                     "LEAF"],
                                  nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                                  class_treeids=[0, 0], class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[1.0, 1.0])]
        outputs = _outputs(2)
    path = _model(tmp_path / "m.onnx", nodes, outputs)
    code, _, err = cli(capsys, "export", "--model", path, "--backends", "portable", "--out", tmp_path / "out")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    said = {"ZipMap": "is a list of dictionaries", "text labels": "output label is text"}.get(op, f"no PyTorch form for {op}")
    assert said in line and fix in line, line
    assert not (tmp_path / "out" / "index.json").exists()
