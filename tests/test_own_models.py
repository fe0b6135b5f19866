"""A model of one's own, as the executorch_flutter app shows it: ``--task`` makes it a family's
(category, decoding, agreement on the photos, preprocessing), ``--name`` names it and
``--labels-file`` gives its classes, checked against its output."""

import json

import pytest
from conftest import written

from flutter_app import build_models, parse_both
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus


def entries(out) -> dict:
    return {e["name"]: e for e in json.loads((out / "index.json").read_text())["models"]}


@pytest.mark.slow
def test_a_classifier_and_a_detector_of_ones_own_show_in_the_app(capsys, tmp_path):
    pets, boxes = tmp_path / "pets.txt", tmp_path / "parts.txt"
    pets.write_text("cat\ndog\nfox\n")
    boxes.write_text("bolt\nnut\n")
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:build", "--input-shape", "1,3,64,64",
                            "--task", "classification", "--labels-file", pets, "--backends", "xnnpack",
                            "--out", out, "--bench-runs", "0")
    assert code == ExitStatus.OK, err
    code, stdout2, err = cli(capsys, "export", "--model", "tiny_models:my_detector", "--input-shape", "1,3,64,64",
                             "--task", "detection", "--name", "parts", "--labels-file", boxes, "--fit", "stretch",
                             "--backends", "xnnpack", "--out", out, "--bench-runs", "0")
    assert code == ExitStatus.OK, err
    e = entries(out)
    mine, parts = e["tiny_models_xnnpack.pte"], e["parts_xnnpack.pte"]  # build is no name: the file's is
    assert (mine["category"], mine["task"], parts["category"], parts["task"]) == ("mobilenet", "classification",
                                                                                  "yolo", "detection")
    assert mine["preprocessing"]["size"] == 64 and mine["preprocessing"]["mean"] == [0.485, 0.456, 0.406]
    assert parts["preprocessing"]["fit"] == "stretch" and parts["preprocessing"]["size"] == 64
    assert (out / mine["labelsFile"]).read_text().split() == ["cat", "dog", "fox"]
    assert (out / parts["labelsFile"]).read_text().split() == ["bolt", "nut"]
    for entry in (mine, parts):  # proven on the photos with the family's own agreement
        assert entry["status"] == "VERIFIED" and entry["verification"]["images"]["images"] >= 2
        assert entry["verification"]["images"].get("agreement") == 1.0
    # both app parsers show them on their platforms, with their labels
    for version, index in parse_both(out / "index.json").items():
        shown = {m.name: m for m in build_models(index, "linux")}
        assert {"tiny_models_xnnpack", "parts_xnnpack"} <= set(shown), (version, list(shown))
        assert shown["parts_xnnpack"].labelsRemoteUrl.endswith("parts_labels.txt")
    assert "does not show category custom" not in stdout + stdout2
    # validate decodes them as their families do: classes by name, boxes
    code, _, err = cli(capsys, "validate", out)
    assert code == ExitStatus.OK, err
    files = {f["file"].rsplit("/", 1)[-1]: f for f in json.loads((out / "validation_report.json").read_text())["files"]}
    first = files["tiny_models_xnnpack.pte"]["images"][0]["results"][0]
    assert first["name"] in ("cat", "dog", "fox")
    assert files["parts_xnnpack.pte"]["status"] == "VERIFIED"


def test_without_a_task_the_summary_says_the_app_hides_it_and_labels_are_checked(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:build", "--input-shape", "1,3,64,64",
                            "--backends", "xnnpack", "--out", out, "--bench-runs", "0")
    assert code == ExitStatus.OK, err
    assert "the executorch_flutter app does not show category custom: give --task" in stdout
    wrong = tmp_path / "four.txt"
    wrong.write_text("a\nb\nc\nd\n")
    code, _, err = cli(capsys, "export", "--model", "tiny_models:build", "--input-shape", "1,3,64,64", "--task",
                       "classification", "--labels-file", wrong, "--backends", "xnnpack", "--out", tmp_path / "o2")
    assert code != ExitStatus.OK
    assert "output scores 3 classes, and --labels-file names 4" in err
    for args, needle in ((["--task", "classification", "--input-shape", "1,3,64,48"], "the app feeds square RGB images"),
                         (["--task", "weather", "--input-shape", "1,3,64,64"], "unknown --task 'weather'"),
                         (["--mean", "1,2", "--task", "classification", "--input-shape", "1,3,64,64"], "--mean 1,2: give three"),
                         (["--mean", "0.5,nan,0.5", "--task", "classification", "--input-shape", "1,3,64,64"],
                          "--mean 0.5,nan,0.5: give three"),
                         (["--labels-file", wrong, "--input-shape", "1,3,64,64"], "describe a task's model")):
        code, _, err = cli(capsys, "export", "--model", "tiny_models:build", *args, "--out", tmp_path / "o3")
        assert code == ExitStatus.USAGE and needle in error_lines(err)[0], err


@pytest.mark.parametrize("task", ["detection", "segmentation", "pose", "face"])
def test_a_task_whose_outputs_the_model_does_not_give_is_refused_in_one_line(capsys, tmp_path, task):
    """A classifier given --task detection (or pose, face, segmentation): the YOLO decoding
    failed on the program's outputs (RUN_FAILED: "IndexError: list index out of range"),
    or counted -3 classes."""
    code, _, err = cli(capsys, "export", "--model", "tiny_models:build", "--input-shape", "1,3,64,64", "--task", task,
                       "--backends", "portable", "--out", tmp_path / "out")
    [said] = error_lines(err)
    assert code == ExitStatus.MODEL and "Traceback" not in err, err
    assert f"tiny_models's outputs (1x3) are not what --task {task} reads: the " in said, said
    assert "fix: give the --task whose outputs these are, or leave out --task" in said, said


def test_one_models_failure_is_that_models_own(capsys, tmp_path):
    """A model whose build fails ends its own rows with its reason; the other model finishes,
    its artifact and manifest entry kept, and the exit code says some rows failed."""
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:tiny", "--model", "tiny_models:raises",
                            "--input-shape", "1,3,16,16", "--backends", "xnnpack", "--out", out, "--bench-runs", "0")
    assert code == ExitStatus.TARGETS_FAILED, err
    manifest = json.loads((out / "index.json").read_text())
    assert [e["name"] for e in manifest["models"]] == ["tiny_xnnpack.pte"] and (out / "custom" / "tiny_xnnpack.pte").is_file()
    failed = json.loads((out / "report.json").read_text())["last_run_failures"]
    [row] = [f for f in failed if f["model"] == "raises"]
    assert row["status"] == "CAPTURE_FAILED" and "the checkpoint server is down" in row["reason"]
    assert "CAPTURE_FAILED" in stdout and "the checkpoint server is down" in stdout
    # the same from a config file's [[model]] tables
    (tmp_path / "two.toml").write_text('backends = ["xnnpack"]\nbench-runs = 0\nout = "cfg"\n'
                                       '[[model]]\nsource = "tiny_models:tiny"\ninput-shape = [1, 3, 16, 16]\n'
                                       '[[model]]\nsource = "tiny_models:raises"\ninput-shape = [1, 3, 16, 16]\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "two.toml")
    assert code == ExitStatus.TARGETS_FAILED, err
    assert [e["name"] for e in json.loads((tmp_path / "cfg" / "index.json").read_text())["models"]] == ["tiny_xnnpack.pte"]


def test_a_config_file_describes_a_zoo_with_model_tables(capsys, tmp_path):
    """[[model]] tables: two models of one's own with their own shapes, tasks, labels,
    preprocessing and targets, beside a catalog model under the top-level keys."""
    (tmp_path / "classes.txt").write_text("cat\ndog\nfox\n")
    (tmp_path / "pteforge.toml").write_text(
        'backends = ["xnnpack"]\nweights = "none"\nbench-runs = 0\nout = "out"\n'
        '[[model]]\nsource = "tiny_models:build"\nname = "pets"\ntask = "classification"\n'
        'input-shape = [1, 3, 64, 64]\nlabels-file = "classes.txt"\nmean = "0.5,0.5,0.5"\n'
        '[[model]]\nsource = "tiny_models:hardswish_net"\ninput-shape = [1, 3, 16, 16]\n'
        'backends = ["xnnpack", "tosa"]\nprecision = "int8"\n')
    code, stdout, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == ExitStatus.OK, err
    out = tmp_path / "out"
    man = json.loads((out / "index.json").read_text())
    rows = {(e["model"], e["target"]): e for e in written(man) + man["references"]}
    assert {t for m, t in rows if m == "pets"} == {"xnnpack"}, "the top level's backends"
    assert {t for m, t in rows if m == "hardswish_net"} == {"xnnpack:int8", "tosa", "xnnpack"}, \
        "its own, and the fp32 program xnnpack:int8 is timed against (tosa runs on a simulator: none)"
    pets = rows[("pets", "xnnpack")]
    assert pets["category"] == "mobilenet" and pets["preprocessing"]["mean"] == [0.5, 0.5, 0.5]
    assert (out / pets["labelsFile"]).read_text().split() == ["cat", "dog", "fox"]
    assert rows[("hardswish_net", "tosa")]["status"] == "SIMULATED"
    assert "hardswish_net (custom, custom)\n✅ Successfully exported 2/2 backends" in stdout, "what its table asked for"
    # a table's unknown key names the table and the key
    (tmp_path / "bad.toml").write_text('[[model]]\nsource = "tiny_models:build"\n[[model]]\nsource = "x"\ntasks = "detection"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "bad.toml")
    assert code == ExitStatus.USAGE
    assert "bad.toml:5: [[model]] table 2: tasks is not a key of a model table; did you mean task?" in error_lines(err)[0], err


@pytest.mark.slow
def test_the_example_zoo_exports(tmp_path):
    """examples/zoo.toml as a user runs it: a catalog model and two of one's own."""
    import shutil

    from conftest import ROOT, run_cli

    for name in ("zoo.toml", "my_models.py", "pets.txt", "parts.txt"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    proc = run_cli("export", "-c", tmp_path / "zoo.toml", "--bench-runs", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    man = json.loads((tmp_path / "zoo" / "index.json").read_text())
    rows = {(e["model"], e["target"]): e for e in written(man)}
    assert rows[("pets", "xnnpack")]["category"] == "mobilenet" and rows[("parts", "xnnpack")]["category"] == "yolo"
    assert rows[("parts", "ethos-u55")]["status"] in ("SIMULATED", "OUT_OF_BUDGET")  # ran on the TOSA reference model
    assert rows[("parts", "ethos-u55")] in man["notForApp"] and ("mobilenet_v3_small", "coreml") in rows
    assert ("pets", "ethos-u55") not in rows, "the top level's targets for pets"
    for version, index in parse_both(tmp_path / "zoo" / "index.json").items():
        assert {"pets_xnnpack", "parts_xnnpack"} <= {m.name for m in build_models(index, "linux")}, version


def test_an_input_shape_of_the_wrong_rank_is_told_the_rank_the_first_layer_takes(capsys, tmp_path):
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:build", "--input-shape", "1,3,64",
                            "--backends", "portable", "--out", tmp_path / "out", "--bench-runs", "0")
    assert code != ExitStatus.OK
    said = " ".join((stdout + err).split())
    assert "(inputs of shape (1, 3, 64))" in said
    assert "the model's first layer, conv (Conv2d), takes 4 dimensions" in said and "give --input-shape 1,3,H,W" in said


def test_float_ids_for_an_embedding_are_told_the_dtype_and_quiet_keeps_each_fix(capsys, tmp_path):
    """Token ids given as floats (no dtype in --input-shape): the fix names the integer
    dtype, and -q's lines keep each failure's fix, an unavailable target's too."""
    code, stdout, err = cli(capsys, "-q", "export", "--model", "tiny_models:embedding(rows=16)", "--input-shape", "1,6",
                            "--weights", "none", "--backends", "portable", "qnn", "--out", tmp_path / "out")
    assert code != ExitStatus.OK and err == ""
    *failed, final = stdout.splitlines()
    assert final.startswith("exported 0/2 target(s)") and len(failed) == 2, stdout
    assert "— fix: the input goes into 0 (Embedding of 16 ids), which takes integer token ids, and it was given as " \
           "float32: give --input-shape int64:1,6" in failed[0]
    assert failed[1].startswith("✗ qnn: UNAVAILABLE: ") and " — fix: " in failed[1]


def test_a_uint8_image_input_is_fed_bytes_over_their_range_and_its_int8_program_is_proven(capsys, tmp_path):
    """An app's RGB bytes (uint8, divided by 255 in the model) were fed ids in [0, 10): a
    near-black image, on which the int8 program came out constant (MISMATCH). They are
    image-like over 0-255, NCHW or NHWC, and the int8 row is proven."""
    import torch

    from pteforge.core.spec import InputSpec, ModelSpec
    from pteforge.models.synthetic import make_inputs

    for shape in ((1, 3, 32, 32), (1, 32, 32, 3)):
        spec = ModelSpec(name="b", family="custom", task="custom", inputs=(InputSpec(shape, "uint8"),), factory="")
        (x,) = make_inputs(spec, 0)
        assert x.dtype == torch.uint8 and tuple(x.shape) == shape and int(x.max()) - int(x.min()) > 150
        assert x.is_contiguous(), "the runtime refuses a permuted input"
    for layout, shape in (("NCHW", "uint8:1,3,32,32"), ("NHWC", "uint8:1,32,32,3")):
        out = tmp_path / layout
        code, stdout, err = cli(capsys, "-q", "export", "--model", f"tiny_models:bytes_image('{layout}')", "--input-shape",
                                shape, "--weights", "none", "--backends", "xnnpack:int8", "--out", out)
        assert code == ExitStatus.OK, stdout + err
        [e] = json.loads((out / "index.json").read_text())["models"]
        assert e["status"] == "VERIFIED" and e["bench"]["p50_ms"] > 0, e
