"""Real catalog models, random weights, through the command line as users run it."""

import hashlib
import json
import re
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, written

from pteforge.api import plan_targets
from pteforge.runtime.pte import read_pte

pytestmark = pytest.mark.slow

DELEGATES = {
    # target -> the delegates its artifact must contain, exactly
    "xnnpack": {"XnnpackBackend"},
    "portable": set(),
    "coreml": {"CoreMLBackend"},
    "vulkan": {"VulkanBackend"},
    "mlx": {"MLXBackend"},
    "openvino": {"OpenvinoBackend"},
    "ethos-u55": {"EthosUBackend"},
    "xnnpack:int8": {"XnnpackBackend"},
}
README_COMMAND = ("export", "--mobilenet", "--weights", "none")  # README's command 1, after its set-up


@pytest.fixture(scope="module")
def mobilenet_run(tmp_path_factory):
    """README's command 1 as a newcomer runs it (into a folder of its own)."""
    out = tmp_path_factory.mktemp("mv3")
    proc = run_cli(*README_COMMAND, "--out", out)
    return proc, out


def sample(page: Path) -> list[str]:
    """The lines of the one fenced sample in ``page`` that shows a run's summary."""
    blocks, block = [], None
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            block = [] if block is None else blocks.append(block)  # opens a block, or closes it (None)
        elif block is not None:
            block.append(line)
    [found] = [b for b in blocks if any("Successfully exported" in line for line in b)]
    return found


def rows(lines: list[str]) -> dict[str, str]:
    """A summary's rows by their first words (the mark, the target and the file), each with
    its status in words (up to its first figure)."""
    found = {}
    for line in lines:
        m = re.match(r"\s*([•⚠✗↳] (?:fp32 reference, not asked for: )?[\w:+-]+: \S+\.pte) \(.*?\) — (\D*)", line)
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_docs_sample_is_what_readmes_command_prints(mobilenet_run, page):
    """The sample summary in the README and in getting-started is README command 1's, as it
    prints on this machine: its heading, its count, and each row it shows with its status."""
    proc, _ = mobilenet_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said, printed = sample(ROOT / page), proc.stdout.splitlines()
    for line in said[:2]:  # the model and its count, word for word
        assert line in printed, (page, line)
    shown, ran = rows(said), rows(printed)
    assert len(shown) >= 4, said
    for row, status in shown.items():
        assert row in ran, (page, row, sorted(ran))
        assert ran[row].startswith(status.rstrip(" …")), (page, row, status, ran[row])


def test_mobilenet_v3_small_every_backend_that_lowers_here(mobilenet_run):
    proc, out = mobilenet_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads((out / "index.json").read_text())
    asked = {e["target"] for e in written(manifest)}
    lowers = {t.name for t in plan_targets(None).targets}
    assert asked == lowers and {"xnnpack", "portable", "coreml", "vulkan", "openvino", "ethos-u55"} <= asked
    assert f"Successfully exported {len(asked)}/{len(asked)} backends" in proc.stdout, "what was asked for"
    # no fp32 reference: none of the reduced programs (coreml and vulkan fp16, int8 on Arm's
    # simulators) runs on this host, so none is timed against one
    assert manifest["references"] == [] and "fp32 reference" not in proc.stdout
    # what the user asked for: offered to the app where a build of it loads the backend and the
    # row is within its budget; Ethos-U and OpenVINO programs no build of the app loads
    assert {"ethos-u55", "openvino"} <= {e["target"] for e in manifest["notForApp"]}
    assert {e["target"] for e in manifest["models"]} == {e["target"] for e in written(manifest)
                                                          if e["status"] != "OUT_OF_BUDGET" and e["platforms"]}
    entries = {e["target"]: e for e in written(manifest)}
    for target, delegates in DELEGATES.items():
        if target not in entries:
            continue
        e = entries[target]
        assert set(read_pte(out / e["file"]).delegates) == delegates, target
        slug = target.replace(":", "_").replace("-weight", "weight")
        assert e["file"] == f"mobilenet/mobilenet_v3_small_{slug}.pte"
    assert entries["ethos-u55"]["precision"] == "int8"
    assert entries["ethos-u55"]["relative"]["fp32"] == "mobilenet_v3_small_portable.pte", "asked for: it is there"
    assert "latency" not in entries["ethos-u55"]["relative"], "Ethos-U cannot be timed here"
    bench = entries["portable"]["bench"]
    assert bench["p50_ms"] > 0 and 5 <= bench["runs"] <= 10, (
        "timed as every artifact that runs here is (a short run), not as a reference of device-only int8")
    assert bench["runs"] == 10 or bench["p50_ms"] > 80, "fewer timed runs only for a program slower than ~0.1 s"
    assert entries["coreml"]["relative"]["fp32_weights_bytes"] > 5e6 and 0.4 < entries["coreml"]["relative"]["size"] < 0.6
    for runnable in ("xnnpack", "portable", "openvino"):
        v = entries[runnable]["verification"]
        assert entries[runnable]["status"] == "VERIFIED" and v["passed"] and v["top1_agreement"] == 1.0
    for device_only in ("coreml", "vulkan"):
        assert entries[device_only]["status"] == "NOT_RUNNABLE_HERE"
    # run on Arm's TOSA reference model, with Vela's own estimates; with random weights int8 may
    # miss its accuracy budget (then OUT_OF_BUDGET: ran and matched, not proven)
    assert entries["ethos-u55"]["status"] in ("SIMULATED", "OUT_OF_BUDGET"), entries["ethos-u55"].get("reason")
    assert entries["ethos-u55"]["verification"]["passed"] and entries["ethos-u55"]["verification"]["simulator"]
    assert entries["ethos-u55"]["estimates"]["cycles"] > 0
    assert entries["openvino"]["verification"]["runtime_precision"] in ("fp32", "bf16")
    # the terminal shows pteforge's lines only: no library's log lines or warnings (the fork
    # server's imports logged a torch warning), without --debug
    chatter = [ln for ln in proc.stderr.splitlines() if re.match(r"[WIE]\d{4} |.*Warning", ln)]
    assert not chatter, chatter


@pytest.fixture(scope="module")
def int8_run(tmp_path_factory):
    """xnnpack:int8, which runs here and so brings the fp32 xnnpack program it is timed
    against."""
    out = tmp_path_factory.mktemp("mv3-int8")
    proc = run_cli("export", "--mobilenet", "--weights", "none", "--backends", "xnnpack:int8", "--out", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out


def test_int8_on_xnnpack_verifies_on_a_catalog_model(int8_run):
    """Static int8 (ExecuTorch's XNNPACK recipe quantizer, calibrated on views of the shipped
    photos) runs here, matches fp32 eager within the int8 tolerance, and is
    measured against the fp32 artifact."""
    proc, out = int8_run
    manifest = json.loads((out / "index.json").read_text())
    entries = {e["target"]: e for e in [*written(manifest), *manifest["references"]]}
    e = entries["xnnpack:int8"]
    assert e["status"] in ("VERIFIED", "OUT_OF_BUDGET") and e["verification"]["passed"]
    assert (e["status"] == "OUT_OF_BUDGET") == bool(e["verification"]["budget_missed"])
    assert e["verification"]["sqnr_db"] >= e["verification"]["threshold_sqnr_db"] == 10.0
    assert e["delegation"]["precision_ops"]["quantize_ops"] > 0
    cal = e["quantization"]["calibration"]
    assert "bus.jpg" in cal["source"] and cal["images"] == cal["samples"] > 0 and cal["synthetic"] == 0
    assert e["relative"]["fp32"] == "mobilenet_v3_small_xnnpack.pte" and e["relative"]["size"] < 0.35
    assert e["relative"]["latency"] > 0
    assert [e["target"] for e in manifest["references"]] == ["xnnpack"], "what xnnpack:int8 is timed against"
    assert "↳ fp32 reference, not asked for: xnnpack: " in proc.stdout


def test_mobilenet_manifest_is_what_the_app_reads(mobilenet_run):
    _, out = mobilenet_run
    manifest = json.loads((out / "index.json").read_text())
    e = next(m for m in manifest["models"] if m["target"] == "xnnpack")
    assert e["name"] == "mobilenet_v3_small_xnnpack.pte" and e["modelName"] == "mobilenet_v3_small"
    assert e["category"] == "mobilenet" and e["task"] == "classification" and e["inputSize"] == 224
    assert e["labelsFile"] == "imagenet_classes.txt"
    assert len((out / e["labelsFile"]).read_text().splitlines()) == 1000
    assert e["delegation"]["percent"] > 80
    assert e["preprocessing"]["mean"] == [0.485, 0.456, 0.406]
    ethos = next(m for m in manifest["notForApp"] if m["target"] == "ethos-u55")
    assert ethos["backend"] == "arm" and ethos["platforms"] == [], "no build of the app links Ethos-U"

    # Through the app's own parser (tests/flutter_app.py): what each platform shows
    from flutter_app import assert_app_reads, build_models

    index = assert_app_reads(out / "index.json")["current"]
    [labels] = index.labels
    assert labels.category == "mobilenet" and labels.remoteUrl == "imagenet_classes.txt"
    assert labels.hash == hashlib.sha256((out / "imagenet_classes.txt").read_bytes()).hexdigest()
    ios = {m.name: m for m in build_models(index, "ios", available={"xnnpack", "coreml"})}
    int8 = {"mobilenet_v3_small_xnnpack_int8_xnnpack"} if any(m["target"] == "xnnpack:int8" for m in manifest["models"]) \
        else set()
    assert {"mobilenet_v3_small_xnnpack", "mobilenet_v3_small_coreml", "mobilenet_v3_small_portable"} | int8 <= set(ios)
    assert "mobilenet_v3_small_vulkan" not in ios, "the app drops a backend its runtime does not have"
    assert ios["mobilenet_v3_small_coreml"].labelsRemoteUrl == "imagenet_classes.txt"
    android = {m.name for m in build_models(index, "android", available={"xnnpack", "vulkan"})}
    assert "mobilenet_v3_small_coreml" not in android and "mobilenet_v3_small_vulkan" in android


@pytest.fixture(scope="module")
def yolo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("yolo")
    proc = run_cli("export", "--yolo", "yolo11n", "--weights", "none", "--backends", "xnnpack", "--out", out)
    return proc, out


def test_yolo11n_on_xnnpack(yolo_run):
    proc, out = yolo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["name"] == "yolo11n_xnnpack.pte" and e["category"] == "yolo" and e["inputSize"] == 640
    assert e["status"] == "VERIFIED" and e["labelsFile"] == "coco_classes.txt"
    assert e["inputShapes"] == [[1, 3, 640, 640]]
    # split, the DFL softmax over dim 1, nearest upsampling and the attention matmuls are
    # rewritten into ops XNNPACK takes (backends/toolkit/rewrite.py): one subgraph (17 before)
    assert e["delegation"]["subgraphs_per_backend"]["XnnpackBackend"] == 1
    left = {o["op"] for o in e["delegation"]["portable_ops"]}
    assert not {"aten__softmax_default", "aten_upsample_nearest2d_vec", "aten_expand_copy_default"} & left
    assert not any("split" in op for op in left)
    # anchors are constants after the dry run, not recomputed on the portable kernels
    assert not {"aten_arange_start_step", "aten_full_default"} & left


def test_validate_on_real_images_catches_damaged_weights(mobilenet_run, tmp_path):
    """Flipped weight bytes load and run silently wrong: only the comparison catches them."""
    import shutil

    from conftest import run_cli as run

    _, out = mobilenet_run
    d = tmp_path / "models"
    (d / "mobilenet").mkdir(parents=True)
    shutil.copy(out / "index.json", d)
    for target in ("xnnpack", "coreml"):
        shutil.copy(out / "mobilenet" / f"mobilenet_v3_small_{target}.pte", d / "mobilenet")
    shutil.copy(out / "mobilenet" / "mobilenet_v3_small_xnnpack.pte", d / "mobilenet" / "damaged.pte")
    manifest = json.loads((d / "index.json").read_text())
    entry = next(m for m in manifest["models"] if m["target"] == "xnnpack")
    manifest["models"].append({**entry, "name": "damaged.pte", "modelName": "mobilenet_v3_small_damaged",
                               "file": "mobilenet/damaged.pte", "remoteUrl": "mobilenet/damaged.pte"})
    (d / "index.json").write_text(json.dumps(manifest))
    damaged = bytearray((d / "mobilenet" / "damaged.pte").read_bytes())
    start = int(len(damaged) * 0.6)
    for i in range(start, start + 4096):
        damaged[i] ^= 0xFF
    (d / "mobilenet" / "damaged.pte").write_bytes(bytes(damaged))

    proc = run("validate", "--models-dir", d, "--output-file", d / "report.json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    files = {f["file"]: f for f in json.loads((d / "report.json").read_text())["files"]}
    assert files["mobilenet/damaged.pte"]["status"] == "MISMATCH"
    good = files["mobilenet/mobilenet_v3_small_xnnpack.pte"]
    assert good["status"] == "VERIFIED" and good["agreement"] == 1.0
    from pteforge.families.vision import shipped_images

    assert [i["image"] for i in good["images"]] == [p.name for p in shipped_images()]
    assert {"bus.jpg", "zidane.jpg"} <= {i["image"] for i in good["images"]}
    assert len(good["images"][0]["results"]) == 5 and good["images"][0]["results"][0]["name"]
    assert good["images"][0]["inference_ms"] > 0
    assert files["mobilenet/mobilenet_v3_small_coreml.pte"]["status"] == "NOT_RUNNABLE_HERE"


def test_validate_yolo_detections_on_real_images(yolo_run):
    _, out = yolo_run
    proc = run_cli("validate", "--models-dir", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [f] = json.loads((out / "validation_report.json").read_text())["files"]
    assert f["status"] == "VERIFIED" and f["agreement"] >= 0.9
    bus = f["images"][0]
    assert bus["image"] == "bus.jpg" and bus["eager_results"] == len(bus["results"])
    det = bus["results"][0]
    assert set(det) == {"box", "score", "class", "name"} and det["score"] > 0.25
    x1, y1, x2, y2 = det["box"]
    assert 0 <= x1 <= x2 <= 810 and 0 <= y1 <= y2 <= 1080, "boxes are in the original image's pixels"
