"""Real catalog models, random weights, through the command line as users run it."""

import json

import pytest
from conftest import run_cli

from pteforge.pte import read_pte

pytestmark = pytest.mark.slow

SHOWN_HERE = {
    # target -> the delegates its artifact must contain, exactly
    "xnnpack": {"XnnpackBackend"},
    "portable": set(),
    "coreml": {"CoreMLBackend"},
    "vulkan": {"VulkanBackend"},
    "openvino": {"OpenvinoBackend"},
    "ethos-u55": {"EthosUBackend"},
    "tosa": {"TOSABackend"},
}


@pytest.fixture(scope="module")
def mobilenet_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mv3")
    proc = run_cli("export", "--mobilenet", "--weights", "none", "--backends", *SHOWN_HERE, "--out", out)
    return proc, out


def test_mobilenet_v3_small_every_backend_that_lowers_here(mobilenet_run):
    proc, out = mobilenet_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Successfully exported {len(SHOWN_HERE)}/{len(SHOWN_HERE)} backends" in proc.stdout
    manifest = json.loads((out / "index.json").read_text())
    entries = {e["target"]: e for e in manifest["models"]}
    assert set(entries) == set(SHOWN_HERE)
    for target, delegates in SHOWN_HERE.items():
        e = entries[target]
        assert set(read_pte(out / e["file"]).delegates) == delegates, target
        assert e["file"] == f"mobilenet/mobilenet_v3_small_{target}.pte"
    assert entries["ethos-u55"]["precision"] == "int8" and entries["tosa"]["precision"] == "int8"
    for runnable in ("xnnpack", "portable", "openvino"):
        v = entries[runnable]["verification"]
        assert entries[runnable]["status"] == "VERIFIED" and v["passed"] and v["top1_agreement"] == 1.0
    for device_only in ("coreml", "vulkan", "ethos-u55", "tosa"):
        assert entries[device_only]["status"] == "NOT_RUNNABLE_HERE"
    assert entries["openvino"]["verification"]["runtime_precision"] in ("fp32", "bf16")


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
    assert next(m for m in manifest["models"] if m["target"] == "ethos-u55")["backend"] == "arm"


def test_yolo11n_on_xnnpack(tmp_path):
    proc = run_cli("export", "--yolo", "yolo11n", "--weights", "none", "--backends", "xnnpack", "--out", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [e] = json.loads((tmp_path / "index.json").read_text())["models"]
    assert e["name"] == "yolo11n_xnnpack.pte" and e["category"] == "yolo" and e["inputSize"] == 640
    assert e["status"] == "VERIFIED" and e["labelsFile"] == "coco_classes.txt"
    assert e["inputShapes"] == [[1, 3, 640, 640]]
    # YOLO is split around ops XNNPACK does not take: report the split as it is.
    assert e["delegation"]["subgraphs_per_backend"]["XnnpackBackend"] > 1
    assert e["delegation"]["portable_ops"], "some YOLO ops stay on the portable kernels"
