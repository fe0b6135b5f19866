"""Model files other projects ship: ONNX graphs with dynamic axes, shape subgraphs, several
named inputs and an int64 scalar; TorchScript files recognised by their content. Each is
a small file made here with the same traits as the real ones (a YOLOv8-style head whose
anchors come from Shape/Range, a VAD-style model branching on its sample rate), exported
through the real command line, lowered, and verified against ONNX Runtime on the file."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus


def export(capsys, *args):
    code, stdout, err = cli(capsys, "export", *args, "--bench-runs", "0")
    return code, stdout + err


def entries(out) -> dict:
    return {e["target"]: e for e in json.loads((out / "index.json").read_text())["models"]}


def yolo_style_onnx(path, opset: int = 12):
    """A detector head whose anchors and stride are computed from the feature map's shape
    (Shape, Gather, Range, Expand), exported with dynamic batch, height and width, as
    Ultralytics and many exporters write detectors."""
    import torch

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 8, 3, stride=4, padding=1)
            self.head = torch.nn.Conv2d(8, 6, 1)

        def forward(self, x):
            y = self.head(torch.relu(self.conv(x)))
            b, c, h, w = y.shape
            gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5,
                                    torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
            anchors = torch.stack((gx, gy), 0).view(1, 2, -1)
            y = y.view(b, c, -1)
            return torch.cat(((y[:, :2] + anchors) * (x.shape[2] / h), y[:, 2:].sigmoid()), 1)

    torch.onnx.export(Head().eval(), (torch.rand(1, 3, 64, 64),), str(path), dynamo=False, opset_version=opset,
                      input_names=["images"], output_names=["output0"],
                      dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}, "output0": {0: "batch", 2: "n"}})
    return path


def test_a_dynamic_onnx_file_asks_for_its_dims_then_is_folded_and_verified(capsys, tmp_path):
    onnx_file = yolo_style_onnx(tmp_path / "det.onnx")
    code, said = export(capsys, "--model", onnx_file, "--backends", "xnnpack", "--out", tmp_path / "o1")
    assert code == ExitStatus.USAGE, said
    [line] = error_lines(said)
    assert "dynamic dims" in line and "images [batch, 3, height, width]" in line
    assert "--input-shape images=BATCH,3,HEIGHT,WIDTH" in line and "forward()" not in line
    assert not (tmp_path / "o1").exists(), "a usage error is found before any work"

    out = tmp_path / "out"
    code, said = export(capsys, "--model", onnx_file, "--input-shape", "images=1,3,96,128",
                        "--backends", "xnnpack", "--out", out)
    assert code == 0, said
    e = entries(out)["xnnpack"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60
    assert e["delegation"]["percent"] == 100.0, e["delegation"]
    assert e["inputShapes"] == [[1, 3, 96, 128]]
    assert e["outputs"][0]["shape"] == [1, 6, 24 * 32]


def test_folding_is_kept_only_where_onnx_runtime_gives_the_original_outputs(tmp_path):
    import numpy as np
    import onnx

    from pteforge.models.onnx.spec import onnx_spec
    from pteforge.models.onnx.graph import checked, fixed, folded, seeded_feeds
    from pteforge.core.spec import InputSpec

    path = yolo_style_onnx(tmp_path / "det.onnx")
    spec = onnx_spec(str(path), (InputSpec((1, 3, 64, 64), name="images"),))
    original = fixed(onnx.load(str(path)), spec.inputs)
    result = folded(original)
    assert not any(n.op_type in ("Shape", "Range") for n in result.graph.node), "the shape subgraph is folded"
    feeds = seeded_feeds(original)
    assert set(feeds) == {"images"} and feeds["images"].shape == (1, 3, 64, 64)
    assert checked(result, original, feeds) is result
    broken = onnx.ModelProto()
    broken.CopyFrom(result)
    weight = next(i for i in broken.graph.initializer if len(onnx.numpy_helper.to_array(i).shape) == 4)
    weight.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(weight) * np.float32(1.5), weight.name))
    assert checked(broken, original, feeds) is None, "a folded graph whose outputs differ is not imported"


def branching_onnx(path):
    """Two float inputs (audio and a recurrent state) and an int64 scalar sample rate the
    graph branches on with an ONNX If, as voice-activity detectors are published."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["mixed"], [f"y_{name}"])], name, [],
                                 [helper.make_tensor_value_info(f"y_{name}", TensorProto.FLOAT, [1, 8])])

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["input", "w"], ["proj"]),
         helper.make_node("ReduceMean", ["state"], ["pooled"], axes=[0], keepdims=0),
         helper.make_node("Add", ["proj", "pooled"], ["mixed"]),
         helper.make_node("Equal", ["sr", "sixteen_k"], ["is_16k"]),
         helper.make_node("If", ["is_16k"], ["output"], then_branch=branch("then", "Tanh"),
                          else_branch=branch("else", "Sigmoid"), name="/decoder/If"),
         helper.make_node("Mul", ["state", "half"], ["stateN"])],
        "vad",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 64]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 1, 8]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, 1, 8])],
        [numpy_helper.from_array(rng.standard_normal((64, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array(16000, dtype=np.int64), "sixteen_k"),
         numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), str(path))
    return path


def test_named_inputs_and_an_int64_scalar_held_at_its_value(capsys, tmp_path):
    onnx_file = branching_onnx(tmp_path / "vad.onnx")
    code, said = export(capsys, "--model", onnx_file, "--backends", "portable", "--out", tmp_path / "o1")
    assert code == ExitStatus.MODEL, said
    [line] = error_lines(said)
    assert "no converter to PyTorch for If (opset 16) at node /decoder/If" in line
    assert "--input-shape NAME=" in line and "forward()" not in line

    code, said = export(capsys, "--model", onnx_file, "--input-shape", "nope=1,64", "--out", tmp_path / "o2")
    assert code == ExitStatus.USAGE and "has no input nope" in error_lines(said)[0]
    assert "its inputs are input, state, sr" in error_lines(said)[0]

    out = tmp_path / "out"
    code, said = export(capsys, "--model", onnx_file, "--input-shape", "sr=int64:16000", "--input-shape", "input=1,64",
                        "--backends", "xnnpack", "portable", "--out", out)
    assert code == 0, said
    for e in entries(out).values():
        assert e["status"] == "VERIFIED", e
        assert e["heldInputs"] == {"sr": 16000}
        # sr is held in the program, not fed; "input" is the file's name (torch.export's placeholder for a
        # Python builtin's name is input_1: the names come from the capture's signature)
        assert [i["name"] for i in e["inputs"]] == ["input", "state"]
        assert [o["name"] for o in e["outputs"]] == ["output", "stateN"]
    proc_code, stdout, err = cli(capsys, "validate", "--models-dir", out)
    assert proc_code == 0, stdout + err
    assert {f["status"] for f in json.loads((out / "validation_report.json").read_text())["files"]} == {"VERIFIED"}

    # the same from a config file, relative to it
    (tmp_path / "pteforge.toml").write_text('model = ["vad.onnx"]\ninput-shape = ["sr=int64:16000", "input=1,64"]\n'
                                            'backends = ["portable"]\nout = "from-file"\nbench-runs = 0\n')
    code, stdout, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == 0, stdout + err
    [e] = json.loads((tmp_path / "from-file" / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["heldInputs"] == {"sr": 16000}


def test_model_files_are_recognised_by_content_not_name(capsys, tmp_path):
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU()).eval()
    scripted = tmp_path / "silero_like.jit"
    torch.jit.script(model).save(str(scripted))
    nameless = tmp_path / "model"
    nameless.write_bytes(scripted.read_bytes())
    onnx_named_bin = tmp_path / "net.bin"
    torch.onnx.export(model, (torch.rand(1, 6),), str(onnx_named_bin), dynamo=False)
    for path in (scripted, nameless, onnx_named_bin):
        out = tmp_path / f"out_{path.name}"
        code, said = export(capsys, "--model", path, "--input-shape", "1,6", "--backends", "portable", "--out", out)
        assert code == 0, said
        assert entries(out)["portable"]["status"] == "VERIFIED"
    weights = tmp_path / "weights.jit"
    torch.save(model.state_dict(), weights)
    code, said = export(capsys, "--model", weights, "--input-shape", "1,6", "--out", tmp_path / "o")
    assert code == ExitStatus.MODEL and "is not a TorchScript program" in error_lines(said)[0]
    code, said = export(capsys, "--model", scripted, "--input-shape", "x=1,6", "--out", tmp_path / "o")
    assert code == ExitStatus.USAGE and "forward takes no 'x'" in error_lines(said)[0]  # by forward's names


@pytest.mark.parametrize("text, expected", [
    ("1,3,224,224", ((1, 3, 224, 224), "float32", None, None)),
    ("1x3x8x8", ((1, 3, 8, 8), "float32", None, None)),
    ("images=1,3,640,640", ((1, 3, 640, 640), "float32", "images", None)),
    ("sr=int64:16000", ((16000,), "int64", "sr", None)),
    ("input_1:0=1,224,224,3", ((1, 224, 224, 3), "float32", "input_1:0", None)),
    ("temperature=0.5", ((), "float32", "temperature", 0.5)),
    ("state=float16:2,1,128", ((2, 1, 128), "float16", "state", None)),
])
def test_input_shapes_are_named_typed_or_valued(text, expected):
    from pteforge.core.spec import InputSpec

    i = InputSpec.parse(text)
    assert (i.shape, i.dtype, i.name, i.value) == expected


@pytest.mark.parametrize("text", ["=1,3", "x=", "x=complex64:1,3", "a,b", "1,-3"])
def test_malformed_input_shapes_are_refused(text):
    from pteforge.core.errors import UsageError
    from pteforge.core.spec import InputSpec

    with pytest.raises(UsageError):
        InputSpec.parse(text)


def test_a_backend_pass_crash_leaves_only_its_part_to_the_portable_kernels(capsys, tmp_path):
    out = tmp_path / "out"
    code, said = export(capsys, "--model", "tiny_models:unbatched", "--input-shape", "3,8,8",
                        "--backends", "xnnpack", "--out", out)
    assert code == 0, said
    e = entries(out)["xnnpack"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60
    [part] = e["delegation"]["left_out"]
    assert part["partitioner"] == "XnnpackPartitioner" and "ChannelsLastTaggedReshapePass" in part["error"]
    assert part["nodes"] == ["aten_max_pool2d_default"], part
    assert e["delegation"]["percent"] > 50, "the rest of the graph stays delegated"
    assert "left to the portable kernels" in said and "XnnpackPartitioner crashed on them" in said

    code, said = export(capsys, "--model", "tiny_models:unbatched", "--input-shape", "3,8,8",
                        "--backends", "xnnpack", "--no-fallback", "--no-cache", "--out", tmp_path / "strict")
    assert code == ExitStatus.TARGETS_FAILED, said
    assert "xnnpack: LOWER_FAILED: the ChannelsLastTaggedReshapePass pass failed" in said
    assert "fix: try another backend or xnnpack at another precision, for this model; --debug shows where" in said


def test_a_prelu_after_a_linear_layer_is_delegated_whole(capsys, tmp_path):
    """MTCNN's R-Net and O-Net: the PReLU after their NHWC permute and dense layer, which
    crashed XNNPACK's channels-last pass, is written as relu(x) - w·relu(-x) for it."""
    out = tmp_path / "out"
    code, said = export(capsys, "--model", "tiny_models:nhwc_before_linear", "--input-shape", "1,3,20,20",
                        "--backends", "xnnpack", "--out", out)
    assert code == 0, said
    e = entries(out)["xnnpack"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60
    assert e["delegation"]["percent"] == 100.0 and not e["delegation"]["left_out"], e["delegation"]


@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.data())
def test_bisection_finds_the_smallest_failing_run(sizes, data):
    """Lowering fails while a chosen node is delegated: the search leaves out that node alone."""
    from pteforge.stages.fallback import _smallest_failing

    runs = [[f"p{i}_n{j}" for j in range(n)] for i, n in enumerate(sizes)]
    culprit = data.draw(st.sampled_from([name for run in runs for name in run]))
    tried = []

    def fails(only):
        tried.append(only)
        return RuntimeError("crash") if any(culprit in run for run in only) else None

    assert _smallest_failing(runs, fails) == [culprit]
    assert len(tried) <= 2 * (len(runs).bit_length() + max(sizes).bit_length()) + 1
    assert _smallest_failing(runs, lambda only: RuntimeError("elsewhere")) == [], "a crash that is not in them"


def test_an_lstm_with_its_state_as_inputs_is_imported_and_verified(capsys, tmp_path):
    """ONNX's LSTM (silero-vad, OCR recognizers), which onnx2torch lacks: a bidirectional
    one fed its initial state, exported by torch's exporter with gates in ONNX's order."""
    import torch

    class Recognizer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lstm = torch.nn.LSTM(8, 6, bidirectional=True)
            self.head = torch.nn.Linear(12, 5)

        def forward(self, x, h, c):
            y, (h, c) = self.lstm(x, (h, c))
            return self.head(y).softmax(-1), h, c

    onnx_file = tmp_path / "rec.onnx"
    torch.onnx.export(Recognizer().eval(), (torch.rand(7, 1, 8), torch.zeros(2, 1, 6), torch.zeros(2, 1, 6)),
                      str(onnx_file), dynamo=False, opset_version=12, input_names=["x", "h", "c"],
                      output_names=["probs", "hn", "cn"])
    out = tmp_path / "out"
    code, said = export(capsys, "--model", onnx_file, "--backends", "xnnpack", "--out", out)
    assert code == 0, said
    e = entries(out)["xnnpack"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60, e
    assert [o["name"] for o in e["outputs"]] == ["probs", "hn", "cn"]


def test_what_tf2onnx_and_spox_write_is_imported(capsys, tmp_path):
    """A Keras-style graph as tf2onnx writes it: GlobalMaxPool, Squeeze and ReduceSum with
    their axes as tensors (opset 13), reflect padding of a [1, N] frame, Expand and Tile by
    constant shapes, and fused TensorFlow ops' names joined with ';'."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, value, dtype=np.int64):
        return numpy_helper.from_array(np.array(value, dtype=dtype), name)

    nodes = [
        helper.make_node("Pad", ["frame", "pads"], ["padded"], mode="reflect", name="model/pad;model/pad"),
        helper.make_node("Unsqueeze", ["padded", "axis1"], ["wave"], name="model/expand_dims"),
        helper.make_node("Conv", ["wave", "w"], ["feat"], kernel_shape=[5], name="model/conv1d;model/conv1d/Conv"),
        helper.make_node("GlobalMaxPool", ["feat"], ["pooled"], name="model/max"),
        helper.make_node("Squeeze", ["pooled", "axis2"], ["vec"], name="model/squeeze"),
        helper.make_node("Expand", ["vec", "shape"], ["wide"], name="model/broadcast_to"),
        helper.make_node("Tile", ["wide", "reps"], ["tiled"], name="model/tile"),
        helper.make_node("ReduceSum", ["tiled", "axis0"], ["out"], keepdims=0, name="model/sum"),
    ]
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        nodes, "keras",
        [helper.make_tensor_value_info("frame", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [const("pads", [0, 4, 0, 4]), const("axis1", [1]), const("axis2", [2]), const("axis0", [0]),
         const("shape", [3, 1, 4]), const("reps", [1, 2, 1]),
         numpy_helper.from_array(rng.standard_normal((4, 1, 5)).astype(np.float32), "w")])
    onnx_file = tmp_path / "keras.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx"),
              str(onnx_file))
    out = tmp_path / "out"
    code, said = export(capsys, "--model", onnx_file, "--backends", "portable", "--out", out)
    assert code == 0, said
    e = entries(out)["portable"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60, e
