"""One model of every task family through the command line with random weights: exported,
verified against eager, decoded on real photos by validate, drawn and shown in report.html;
and an ONNX file, verified against ONNX Runtime on the original file."""

import json

import pytest
from conftest import run_cli
from flutter_app import CURRENT, assert_app_reads, build_models
from test_cli import cli
from test_reports import dump_dom, section

pytestmark = pytest.mark.slow

FAMILIES = {  # flag -> (category, model)
    "--yolo-pose": ("yolo-pose", "yolo11n-pose"),
    "--yolo-face": ("yolo-face", "yolov8n-face"),
    "--yolo-seg": ("yolo-seg", "yolo11n-seg"),
    "--movenet": ("movenet", "movenet_lightning"),
    "--blazeface": ("blazeface", "blazeface"),
}


def export_here(capsys, *args) -> None:
    """``pteforge export`` in this process, through the command line's own entry point
    (``cli.main``): it reuses the fork server an earlier export left in this process, where
    a new process starts its own (~7 s of imports) and a fresh interpreter per capture."""
    code, stdout, err = cli(capsys, "export", *args)
    assert code == 0, stdout + err


@pytest.fixture(scope="module")
def families_run(tmp_path_factory):
    """The families' default models, and a YOLO of the user's (``pets.pt``, a 3-class
    detector as ``yolo train`` leaves it, at 64 x 64) whose pickle names ``shutil.rmtree``
    of a directory: read, built and run again by ``validate``, and nothing in it run."""
    import shutil

    import tiny_models

    base = tmp_path_factory.mktemp("families")  # the run's out, the checkpoint, what it would remove, a site
    out = base / "out"
    (base / "kept").mkdir()
    tiny_models.ultralytics_checkpoint(base / "pets.pt", evil=tiny_models.Calls(shutil.rmtree, str(base / "kept")))
    from pteforge.cli import main

    # in this process, as export_here: the fork server it leaves serves the file's later exports
    code = main(["export", *FAMILIES, "--model", str(base / "pets.pt"), "--weights", "none", "--backends", "xnnpack",
                 "--bench-runs", "0", "--out", str(out)])
    assert code == 0, "the export failed: its output is above"
    return out


def test_every_family_exports_and_verifies_on_photos_by_its_own_metric(families_run):
    manifest = json.loads((families_run / "index.json").read_text())
    entries = {e["model"]: e for e in manifest["models"]}
    assert set(entries) == {m for _, m in FAMILIES.values()} | {"pets"}
    labels = {lab["category"]: lab for lab in manifest["labels"]}
    assert set(labels) == {c for c, _ in FAMILIES.values()}, "a model's own labels are not its category's"
    for category, model in [*FAMILIES.values(), ("yolo", "pets")]:
        e = entries[model]
        assert e["model"] == model and e["status"] == "VERIFIED" and e["delegation"]["percent"] >= 90, e
        images = e["verification"]["images"]
        assert images["images"] >= 2 and images["agreement"] >= 0.9, (category, images)
        assert all("agreement" in row for row in images["per_image"])
        assert e["labelsFile"] == labels[category]["file"] if model != "pets" else e["labelsFile"] == "pets_labels.txt"
        assert (families_run / e["labelsFile"]).read_text().strip()
    pets = entries["pets"]  # the user's own YOLO: its family, classes and size, as the app reads them
    assert (families_run / "pets_labels.txt").read_text() == "cat\ndog\nfox\n"
    assert pets["category"] == "yolo" and pets["inputSize"] == 64 and pets["preprocessing"]["fit"] == "letterbox"
    assert pets["outputs"][0]["shape"] == [1, 4 + 3, 84], "3 class scores for (8 x 8 + 4 x 4 + 2 x 2) anchors"
    [shown] = [m for m in build_models(assert_app_reads(families_run / "index.json")[CURRENT], "android")
               if m.name == "pets_xnnpack"]
    assert shown.category == "yolo" and shown.inputSize == 64 and shown.labelsRemoteUrl == "pets_labels.txt"
    assert (families_run.parent / "kept").is_dir(), "the checkpoint's shutil.rmtree was not run"
    site = families_run.parent / "site"  # a model's own labels file is published with it
    assert run_cli("publish", families_run, "--site", site, "--base-url", "https://x.org").returncode == 0
    [published] = [m for m in assert_app_reads(site / "1.5.1" / "index.json")[CURRENT].models if m.modelName == "pets"]
    assert published.labelsRemoteUrl == "https://x.org/1.5.1/pets_labels.txt"
    assert (site / "1.5.1" / "pets_labels.txt").read_text() == "cat\ndog\nfox\n"
    assert entries["movenet_lightning"]["inputShapes"] == [[1, 192, 192, 3]]
    assert entries["movenet_lightning"]["preprocessing"]["layout"] == "NHWC"
    assert entries["blazeface"]["preprocessing"]["fit"] == "stretch"


def test_validate_decodes_every_family_on_real_photos_and_draws_them(families_run, tmp_path):
    from PIL import Image, ImageChops

    from pteforge.families.vision import shipped_images

    proc = run_cli("validate", "--models-dir", families_run, "--draw")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((families_run / "validation_report.json").read_text())["files"]
    files = {f["file"].split("/")[0]: f for f in report if "pets" not in f["file"]}
    assert set(files) == {c for c, _ in FAMILIES.values()}
    [pets] = [f for f in report if "pets" in f["file"]]  # rebuilt from its checkpoint, decoded with its 3 classes
    assert pets["status"] == "VERIFIED" and pets["agreement"] >= 0.9, pets["reason"]
    assert all(r["name"] in ("cat", "dog", "fox") for i in pets["images"] for r in i["results"])
    assert (families_run.parent / "kept").is_dir()
    for category, f in files.items():
        assert f["status"] == "VERIFIED" and f["agreement"] >= 0.9, (category, f["reason"])
        bus = next(i for i in f["images"] if i["image"] == "bus.jpg")
        drawn = families_run / bus["drawn"]
        results = bus["results"]
        photo = next(p for p in shipped_images() if p.name == "bus.jpg")
        with Image.open(drawn) as img, Image.open(photo) as original:
            assert img.format == "JPEG" and img.size == original.size
            changed = ImageChops.difference(img.convert("RGB"), original.convert("RGB")).getbbox()
            assert changed if results else True, f"{category}: what was found is drawn on the photo"
        if category == "yolo-pose":
            assert results and all(len(r["keypoints"]) == 17 and len(r["box"]) == 4 for r in results)
        if category == "movenet":
            [person] = results
            assert len(person["keypoints"]) == 17
            assert all(0 <= x <= 810 and 0 <= y <= 1080 for x, y, _ in person["keypoints"])
        if category == "blazeface":
            assert results and all(len(r["keypoints"]) == 6 for r in results)
        if category == "yolo-seg":
            assert results and all(r["mask_area"] >= 0 and "_mask" not in r for r in results)
        if category == "yolo-face":
            assert all(r.get("name", "face") == "face" for r in results)
    dom = dump_dom(families_run / "report.html", tmp_path)
    shown = section(dom, "validation")
    for f in files.values():
        assert f'data-file="{f["file"]}"' in shown
        for image in f["images"]:
            link = image["drawn"]
            assert f'src="{link}"' in shown
    # every drawn photo loaded in the browser (onload wrote its width)
    assert shown.count('data-loaded="810"') >= len(files), "bus.jpg drawn for every artifact"
    assert "data-loaded=\"0\"" not in shown


def test_an_onnx_file_is_imported_lowered_and_verified_against_onnx_runtime(capsys, tmp_path):
    import torch

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
    onnx_file = tmp_path / "tinynet.onnx"
    torch.onnx.export(model, (torch.rand(1, 3, 32, 32),), str(onnx_file), dynamo=False,
                      input_names=["image.1"], output_names=["logits"], dynamic_axes={"image.1": {0: "batch"}})
    out = tmp_path / "out"
    export_here(capsys, "--model", onnx_file, "--backends", "xnnpack", "--bench-runs", "0", "--out", out)
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["source"] == str(onnx_file.resolve()) and e["status"] == "VERIFIED"
    assert e["inputShapes"] == [[1, 3, 32, 32]], "the dynamic batch dimension became 1"
    assert e["verification"]["sqnr_db"] > 60
    # the graph's own names, as the file writes them (not the import's Python argument, image_1)
    assert (e["inputs"], e["outputs"]) == ([{"name": "image.1", "shape": [1, 3, 32, 32], "dtype": "float32"}],
                                           [{"name": "logits", "shape": [1, 4], "dtype": "float32"}])
    proc = run_cli("validate", "--models-dir", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [f] = json.loads((out / "validation_report.json").read_text())["files"]
    assert f["status"] == "VERIFIED" and f["sqnr_db"] > 60
    # torch 2.x writes opset 18+, where Constant and ReduceMean changed: onnx2torch knows
    # neither version, so the file is converted down to an opset it does
    class Scaled(torch.nn.Module):
        def forward(self, x):
            return (x * 2.5).mean(dim=(2, 3))

    newer = tmp_path / "scaled.onnx"
    torch.onnx.export(Scaled(), (torch.rand(1, 3, 8, 8),), str(newer), dynamo=False, opset_version=19)
    export_here(capsys, "--model", newer, "--backends", "portable", "--bench-runs", "0", "--out", out)
    entries = {e["name"]: e for e in json.loads((out / "index.json").read_text())["models"]}
    assert entries["scaled_portable.pte"]["status"] == "VERIFIED"
    onnx_file.write_bytes(b"not onnx")
    proc = run_cli("export", "--model", onnx_file, "--backends", "xnnpack", "--out", tmp_path / "bad")
    assert proc.returncode != 0 and "is not an ONNX model" in proc.stderr and "Traceback" not in proc.stderr


def test_a_torchscript_file_is_converted_lowered_and_verified(capsys, tmp_path):
    """PyTorch Mobile's TorchScript files (scripted, traced, .ptl) are converted with
    torch's TS2EPConverter, lowered and verified against the TorchScript module itself;
    a torch.save file of weights is refused, saying how to export it."""
    import torch

    from pteforge.core.errors import ExitStatus

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4)).eval()
    example = torch.rand(1, 3, 16, 16)
    torch.jit.script(model).save(str(tmp_path / "scripted.pt"))
    torch.jit.trace(model, (example,))._save_for_lite_interpreter(str(tmp_path / "traced.ptl"))

    class Grid(torch.nn.Module):  # sizes used as values, as YOLO's decoding does
        def __init__(self):
            super().__init__()
            self.conv = model[0]

        def forward(self, x):
            y = self.conv(x)
            return (y * torch.arange(y.shape[-1], dtype=y.dtype)).flatten(2).softmax(-1)

    torch.jit.trace(Grid().eval(), (example,)).save(str(tmp_path / "grid.pt"))
    out = tmp_path / "out"
    export_here(capsys, "--model", tmp_path / "scripted.pt", "--model", tmp_path / "traced.ptl",
                "--model", tmp_path / "grid.pt", "--input-shape", "1,3,16,16", "--backends", "xnnpack", "portable",
                "--bench-runs", "0", "--out", out)
    entries = json.loads((out / "index.json").read_text())["models"]
    assert {(e["model"], e["target"]) for e in entries} == {(m, t) for m in ("scripted", "traced", "grid")
                                                            for t in ("xnnpack", "portable")}
    for e in entries:
        assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60, e
        ops = {o["op"] for o in e["delegation"]["portable_ops"]}
        assert "sym_size" not in ops, "the converter's size symbols are the example's sizes, not ops of the program"
        if e["target"] == "xnnpack":  # unbounded size symbols kept XNNPACK from 62 % of the traced grid
            assert e["delegation"]["delegated_nodes"] == e["delegation"]["total_nodes"], e["delegation"]
    assert {e["source"] for e in entries} == {str((tmp_path / f).resolve()) for f in ("scripted.pt", "traced.ptl", "grid.pt")}

    torch.save(model.state_dict(), tmp_path / "weights.pt")
    proc = run_cli("export", "--model", tmp_path / "weights.pt", "--input-shape", "1,3,16,16", "--backends", "portable",
                   "--out", tmp_path / "bad")
    assert proc.returncode == ExitStatus.MODEL, proc.stderr
    assert "is not a TorchScript program" in proc.stderr and "--weights" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("export", "--model", tmp_path / "scripted.pt", "--backends", "portable", "--out", tmp_path / "bad")
    assert proc.returncode == ExitStatus.USAGE and "keeps no input shapes" in proc.stderr
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("how", ["script", "trace"])
def test_a_torchscript_module_is_captured_as_torch_export_captures_the_module(how):
    """The converter writes aten.convolution where torch.export writes conv2d/conv1d/
    conv_transpose2d, and makes every weight a buffer; the Arm quantizer, TOSA lowering and
    partitioners match the ops and tell weights by their being parameters (a traced
    mobilenet_v3_small failed TOSA int8 and fp32). The captured program has torch.export's
    operators and parameters."""
    import collections

    import torch

    from pteforge.stages.capture import export_model

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(8, 4, 2, stride=2), torch.nn.Flatten(2),
                                torch.nn.Conv1d(4, 2, 3)).eval()
    example = (torch.rand(1, 3, 10, 10),)
    scripted = torch.jit.script(model) if how == "script" else torch.jit.trace(model, example)

    def facts(program):
        ops = collections.Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")
        kinds = {s.target: s.kind.name for s in program.graph_signature.input_specs if s.kind.name != "BUFFER"}
        return ops, kinds

    assert facts(export_model(scripted, example)) == facts(torch.export.export(model, example))
    assert torch.equal(export_model(scripted, example).module()(*example), model(*example))



def test_a_published_onnx_file_as_the_families_import_it_lowers_and_verifies(capsys, tmp_path):
    """MoveNet's and BlazeFace's pretrained weights are published ONNX files (NHWC input),
    imported with onnx2torch and wrapped to take pteforge's NCHW input
    (``onnx_file_model``). The imported layers' names hold "/" ("c/0/Conv"): lowering once
    looked them up in the wrapper's own fx graph and failed on every backend. BlazeFace pads
    its channels: torch's TorchScript-based exporter writes ``F.pad`` with pads the graph
    computes from constants, which are computed before the import."""
    import torch

    class Nhwc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 3))

        def forward(self, x):
            x = torch.nn.functional.pad(x.permute(0, 3, 1, 2), (0, 0, 0, 0, 0, 0))  # as BlazeFace's channel padding
            return torch.nn.functional.pad(self.c(x), (0, 0, 0, 0, 0, 2))

    onnx_file = tmp_path / "published.onnx"
    torch.onnx.export(Nhwc().eval(), (torch.rand(1, 16, 16, 3),), str(onnx_file), dynamo=False, opset_version=13)
    (tmp_path / "published.py").write_text(
        "from pteforge.models.onnx.build import onnx_file_model\n\n\n"
        f"def build():\n    return onnx_file_model({str(onnx_file)!r}, 'published', nhwc=True)\n")
    out = tmp_path / "out"
    export_here(capsys, "--model", f"{tmp_path / 'published.py'}:build", "--input-shape", "1,3,16,16",
                "--weights", "none", "--backends", "xnnpack", "--bench-runs", "0", "--out", out)
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["delegation"]["percent"] == 100, e


def test_an_onnx_pad_and_reshape_whose_arguments_are_constants_are_captured(capsys, tmp_path):
    """From opset 11 ONNX gives Pad its pads, and Reshape its shape, as inputs; onnx2torch
    reads them when it runs, which torch.export refuses, so every such file failed its
    capture (MediaPipe's BlazeFace pads its channels). Where the file gives them as
    constants they are taken as numbers (ONNX's Reshape 0 included)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "value"], ["padded"], mode="constant"),
         helper.make_node("Reshape", ["padded", "shape"], ["y"])],
        "pad_reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 36])],
        [numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64), "pads"),
         numpy_helper.from_array(np.array(0.5, dtype=np.float32), "value"),
         numpy_helper.from_array(np.array([1, 0, -1], dtype=np.int64), "shape")],
    )
    onnx_file = tmp_path / "pad_reshape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(onnx_file))
    out = tmp_path / "out"
    export_here(capsys, "--model", onnx_file, "--backends", "portable", "--bench-runs", "0", "--out", out)
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60, e
    assert e["outputs"] == [{"name": "y", "shape": [1, 3, 36], "dtype": "float32"}]


def test_an_onnx_file_as_ultralytics_writes_it_is_captured(capsys, tmp_path):
    """What ``yolo export format=onnx`` writes (opset 18 by default, 13 asked for): an
    upsampling Resize by constant scales and the head's Slice by constant bounds, which
    onnx2torch reads when it runs (torch.export: "Could not guard on data-dependent
    expression", ".numpy() is not supported"), and at opset 18 Split and Resize versions
    onnx2torch has no converter for, which ONNX's version converter cannot take down.
    Every such file failed to import or to capture."""
    import torch

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 6, 3, padding=1)
            self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")

        def forward(self, x):
            a, b = self.conv(x).split((2, 4), 1)
            y = self.up(torch.cat([a.sigmoid(), b], 1))
            return y[:, :4] * y[:, 4:].flatten(2).softmax(-1).view(1, 2, 16, 16).sum(1, keepdim=True)

    files = [tmp_path / f"yolo_like_{opset}.onnx" for opset in (13, 18)]
    for opset, onnx_file in zip((13, 18), files):
        torch.onnx.export(Head().eval(), (torch.rand(1, 3, 8, 8),), str(onnx_file), dynamo=False, opset_version=opset)
    out = tmp_path / "out"
    export_here(capsys, *(a for f in files for a in ("--model", f)), "--backends", "xnnpack", "--bench-runs", "0",
                "--out", out)
    entries = json.loads((out / "index.json").read_text())["models"]
    assert sorted(e["model"] for e in entries) == ["yolo_like_13", "yolo_like_18"]
    for e in entries:
        assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60, e
        assert e["delegation"]["percent"] == 100, "the split sizes are numbers: no slicing left outside XNNPACK"
