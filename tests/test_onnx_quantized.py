"""Quantized ONNX files: the QDQ format (QuantizeLinear/DequantizeLinear around float
operators, as ONNX Runtime's quantization tool writes them) imports as float operators that
compute ONNX Runtime's values; the QOperator format is refused in one line naming its operator."""

import json

import numpy as np
import pytest
import torch
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus
from pteforge.models.onnx.graph import ort_session
from pteforge.models.onnx.qdq import fake_quantized
from pteforge.models.onnx.reference import OnnxReference


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        return self.fc((y + y.sigmoid()).mean((2, 3)))


def _quantized(tmp_path, **options):
    """_Net as ONNX, quantized by ONNX Runtime's tool with ``options``."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    torch.manual_seed(0)
    fp = tmp_path / "net.onnx"
    torch.onnx.export(_Net().eval(), (torch.rand(1, 3, 16, 16),), str(fp), dynamo=False, input_names=["x"],
                      opset_version=17)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.left = [np.random.default_rng(i).random((1, 3, 16, 16), dtype=np.float32) for i in range(4)]

        def get_next(self):
            return {"x": self.left.pop()} if self.left else None

    out = tmp_path / f"net_{len(list(tmp_path.glob('net_*.onnx')))}.onnx"
    quantize_static(str(fp), str(out), Reader(), **options)
    return out


@pytest.mark.parametrize("options", [
    {"per_channel": True},  # int8 activations and weights, weights per output channel
    {"per_channel": False, "activation_type": "QUInt8", "weight_type": "QUInt8"},
], ids=["int8-per-channel", "uint8"])
def test_a_qdq_file_becomes_float_operators_with_onnx_runtimes_values(tmp_path, options):
    import onnx
    import onnxruntime
    from onnxruntime.quantization import QuantFormat, QuantType

    options = {k: getattr(QuantType, v) if k.endswith("_type") else v for k, v in options.items()}
    path = _quantized(tmp_path, quant_format=QuantFormat.QDQ, **options)
    model = onnx.load(str(path))
    rewritten = fake_quantized(model)
    assert rewritten is not None
    kinds = {n.op_type for n in rewritten.graph.node}
    assert not kinds & {"QuantizeLinear", "DequantizeLinear", "Round"} and "Clip" in kinds
    x = np.random.default_rng(7).random((1, 3, 16, 16), dtype=np.float32)
    actual, = onnxruntime.InferenceSession(rewritten.SerializeToString()).run(None, {"x": x})
    # The file's operators as written (ONNX Runtime's graph optimizations off): the same values.
    # Optimized, ONNX Runtime fuses them into integer kernels whose rounding is the CPU's (on an
    # AMD EPYC without AVX-512, an intermediate value a step apart moved an output 3 of its
    # steps), so those are no reference (models/onnx/reference.py).
    expected, = ort_session(onnx.load(str(path))).run(None, {"x": x})
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-6)
    reference, = OnnxReference(str(path))(torch.from_numpy(x))  # what a program is judged against
    np.testing.assert_allclose(reference.numpy(), expected, rtol=0, atol=1e-6)


def test_a_qdq_file_exports_and_is_judged_at_int8_and_a_qoperator_file_is_one_line(capsys, tmp_path):
    from onnxruntime.quantization import QuantFormat

    qdq = _quantized(tmp_path, quant_format=QuantFormat.QDQ, per_channel=True)
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", qdq, "--backends", "xnnpack", "xnnpack:fp16", "--out", out,
                            "--bench-runs", "0")
    assert code == ExitStatus.OK, stdout + err
    entries = {e["target"]: e for e in json.loads((out / "index.json").read_text())["models"]}
    assert entries["xnnpack:fp16"]["status"] == "VERIFIED", "the rounding holds at fp16 (1.5 * 2^23 did not)"
    e = entries["xnnpack"]
    v = e["verification"]
    assert e["status"] == "VERIFIED" and v["runtime_precision"] == "int8" and v["threshold_sqnr_db"] == 10.0, v
    assert set(e["delegation"]["delegates_in_program"]) == {"XnnpackBackend"} and e["delegation"]["percent"] > 50

    qop = _quantized(tmp_path, quant_format=QuantFormat.QOperator, per_channel=False)
    code, _, err = cli(capsys, "export", "--model", qop, "--backends", "xnnpack", "--out", tmp_path / "qop")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert "ONNX Runtime's quantized-operator format (QOperator" in line and "QuantFormat.QDQ" in line, line


def test_weights_quantized_in_the_graph_per_channel_are_computed_as_onnx_runtime_does():
    """TensorRT's tools quantize float weights inside the graph (QuantizeLinear of the float
    weight, per output channel, then DequantizeLinear), and one activation's QuantizeLinear
    is read by two DequantizeLinears."""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    c = lambda name, value: numpy_helper.from_array(np.asarray(value), name)  # noqa: E731
    constants = [c("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32)),
                 c("ws", (np.abs(rng.standard_normal(4)) / 50 + 1e-3).astype(np.float32)), c("wz", np.zeros(4, np.int8)),
                 c("xs", np.float32(0.02)), c("xz", np.int8(3))]
    nodes = [helper.make_node("QuantizeLinear", ["w", "ws", "wz"], ["wq"], axis=0),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd2"]),
             helper.make_node("Conv", ["xd", "wd"], ["y"]),
             helper.make_node("ReduceSum", ["xd2"], ["s"], keepdims=0)]
    graph = helper.make_graph(nodes, "trt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, None)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rewritten = fake_quantized(model)
    assert rewritten is not None and not {n.op_type for n in rewritten.graph.node} & {"QuantizeLinear", "DequantizeLinear"}
    x = (rng.standard_normal((1, 3, 8, 8)) * 2).astype(np.float32)
    expected = ort_session(model).run(None, {"x": x})  # the file's operators as written, on any CPU (test above)
    actual = onnxruntime.InferenceSession(rewritten.SerializeToString()).run(None, {"x": x})
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)
