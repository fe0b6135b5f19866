"""Task families: one file each, found rather than listed; every family's decoding checked
against the model library's own predictor or against outputs built by hand."""

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import ROOT

from pteforge.families import families, family
from pteforge.families.vision import Letterbox, shipped_images

APP_CATEGORIES = {"mobilenet", "yolo", "yolo-pose", "yolo-face", "movenet", "blazeface"}


def test_every_app_category_and_segmentation_is_a_family_with_its_flag_and_config_key():
    from pteforge.cli import _build_parser
    from pteforge.ui.config import export_file

    found = {f.category: f for f in families()}
    assert APP_CATEGORIES | {"yolo-seg"} <= set(found)
    help_text = _build_parser().format_help() + _build_parser()._subparsers._group_actions[0].choices["export"].format_help()
    keys = export_file().model_fields
    for fam in found.values():
        assert f"--{fam.word}" in help_text and fam.word.replace("-", "_") in keys
        if fam.task == "text-generation":  # a tokenizer instead of labels and preprocessing
            assert fam.models and not fam.everyday, "a language model is exported when named"
            continue
        assert fam.models and fam.task and fam.labels_file and fam.preprocessing_of(fam.models[0]) is not None
        assert fam.label_names(), fam


def test_label_names_are_the_libraries_own_and_read_without_importing_torch():
    """The ImageNet and COCO names come from the files torchvision and Ultralytics ship, read
    in the run's own process at its start: importing those libraries there cost ~2.5 s."""
    code = ("import sys, json; from pteforge.families import family; "
            "names = {c: family(c).label_names() for c in ('mobilenet', 'yolo')}; "
            "print(json.dumps([names, [m for m in ('torch', 'torchvision', 'ultralytics') if m in sys.modules]]))")
    names, imported = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                check=True).stdout)
    assert imported == []
    from pteforge.models import ultralytics_models  # noqa: F401, I001  (its offline settings first)
    from torchvision.models import MobileNet_V3_Small_Weights
    import ultralytics
    from ultralytics.utils import YAML

    assert names["mobilenet"] == list(MobileNet_V3_Small_Weights.DEFAULT.meta["categories"])
    coco = YAML.load(Path(ultralytics.__file__).parent / "cfg" / "datasets" / "coco.yaml")["names"]
    assert names["yolo"] == [coco[i] for i in sorted(coco)] and len(names["yolo"]) == 80


def test_a_family_file_dropped_into_the_package_is_a_catalog_model_and_a_flag(tmp_path):
    """Adding a family touches nothing else: a copy of the package with one more file."""
    shutil.copytree(ROOT / "pteforge", tmp_path / "pteforge", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pteforge" / "families" / "depth.py").write_text(
        "from ..core.spec import Preprocessing\nfrom .base import Family\n\n\n"
        "class Depth(Family):\n    word = 'midas'\n    category = 'depth'\n    task = 'depth'\n"
        "    models = ('midas_tiny',)\n    factory = 'x:y'\n    input_shape = (1, 3, 64, 64)\n"
        "    preprocessing = Preprocessing(size=64)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    models = subprocess.run([sys.executable, "-m", "pteforge", "models"], capture_output=True, text=True, env=env,
                            timeout=120, cwd=tmp_path)
    assert models.returncode == 0 and "midas_tiny" in models.stdout and "depth" in models.stdout, models.stdout + models.stderr
    helps = subprocess.run([sys.executable, "-m", "pteforge", "export", "--help"], capture_output=True, text=True, env=env,
                           timeout=120, cwd=tmp_path)
    assert "--midas" in helps.stdout


def test_blazeface_decodes_a_box_and_landmarks_built_by_hand():
    fam = family("blazeface")
    raw, logits = torch.zeros(1, 896, 16), torch.full((1, 896, 1), -10.0)
    anchor = 300  # on the 16x16 grid, 2 per cell: cell 150 -> x 6, y 9
    raw[0, anchor, 2:4] = 0.25 * 128  # a quarter of the input wide and high
    raw[0, anchor, 4:6] = torch.tensor([-8.0, -8.0])  # first landmark 8 px up-left of the anchor
    logits[0, anchor, 0] = 3.0
    meta = Letterbox(gain=128 / 256, pad=(0.0, 0.0), shape=(256, 256))  # a 256x256 photo, stretched
    [face] = fam.decode([raw, logits], meta, None)
    cx, cy = (6 + 0.5) / 16 * 256, (9 + 0.5) / 16 * 256
    assert face["box"] == pytest.approx([cx - 32, cy - 32, cx + 32, cy + 32], abs=0.1)
    assert face["keypoints"][0][:2] == pytest.approx([cx - 16, cy - 16], abs=0.1)
    assert face["score"] == pytest.approx(float(torch.sigmoid(torch.tensor(3.0))), abs=1e-4)
    assert fam.agreement([raw, logits], [raw, logits], meta) == 1.0
    moved = raw.clone()
    moved[0, anchor, 0] += 20.0
    assert fam.agreement([raw, logits], [moved, logits], meta) == 0.0


def test_movenet_decoding_finds_the_centre_nearest_the_middle_and_refines_on_the_heatmaps():
    from pteforge.families.movenet import decode

    h = w = 48
    center = torch.zeros(1, 1, h, w)
    center[0, 0, 24, 24], center[0, 0, 2, 2] = 0.8, 0.9  # the middle one wins (distance prior)
    heat = torch.zeros(1, 17, h, w)
    regression = torch.zeros(1, 34, h, w)
    regression[0, 0::2, 24, 24], regression[0, 1::2, 24, 24] = 5.0, -3.0  # every keypoint at (29, 21)
    heat[:, :, 30, 20] = 0.7  # the peak beside the regressed point
    offset = torch.full((1, 34, h, w), 0.25)
    out = decode(center, heat, regression, offset)
    assert out.shape == (1, 1, 17, 3)
    assert out[0, 0, :, 0] == pytest.approx(torch.full((17,), (30 + 0.25) / h))
    assert out[0, 0, :, 1] == pytest.approx(torch.full((17,), (20 + 0.25) / w))
    assert out[0, 0, :, 2] == pytest.approx(torch.full((17,), 0.7))


def test_keypoint_similarity_is_one_for_the_same_keypoints_and_falls_with_distance():
    from pteforge.families.pose import oks

    points = [[10.0 * k, 5.0 * k, 1.0] for k in range(17)]
    assert oks(points, points, 100 * 100) == 1.0
    near, far = ([[x + d, y, s] for x, y, s in points] for d in (1.0, 20.0))
    assert 1.0 > oks(points, near, 100 * 100) > 0.95 > oks(points, far, 100 * 100)


def _seeded(yaml: str):
    """An Ultralytics model with random weights whose scores are spread (not all 1.0), as in
    test_validate's detector test."""
    from ultralytics import YOLO
    from ultralytics.nn.modules import Detect

    from pteforge.models.catalog import build_catalog
    from pteforge.models.synthetic import make_inputs
    from pteforge.models.weights import recalibrate_batchnorm

    from ultralytics.nn import tasks

    torch.manual_seed(0)
    yolo = YOLO(yaml)
    spec = build_catalog().get(yaml.removesuffix(".yaml"))
    fam = family(spec.family)
    yolo.model = getattr(tasks, fam.model_class)(yaml, nc=fam.nc, verbose=False)  # the family's classes
    recalibrate_batchnorm(yolo.model, lambda i: make_inputs(spec, i, batch=2))
    head = next(m for m in yolo.model.modules() if isinstance(m, Detect))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for branch in head.cv3:
            conv = branch[-1]
            conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.0005)
            conv.bias.copy_(torch.randn(conv.bias.shape, generator=g) - 3)
    return yolo, spec


def _threshold(out, nc: int, count: int = 20) -> float:
    """A score threshold that keeps about ``count`` anchors of this output."""
    scores = out[0].transpose(0, 1)[:, 4:4 + nc].max(1).values
    return float(scores.topk(count).values[-1]) - 1e-6


@pytest.mark.slow
def test_pose_decoding_agrees_with_ultralytics_predictor():
    from pteforge.models.ultralytics_models import to_export_mode
    from pteforge.families.vision import box_iou

    yolo, spec = _seeded("yolo11n-pose.yaml")
    fam = type(family("yolo-pose"))()  # its own instance: the test lowers its threshold
    ours = to_export_mode(copy.deepcopy(yolo.model))
    bus = next(p for p in shipped_images() if p.name == "bus.jpg")
    prepared = fam.prepare(bus, spec)
    with torch.no_grad():
        out = [ours(prepared.tensor)]
    conf = _threshold(out[0], fam.nc)
    result = yolo.predict(str(bus), conf=conf, iou=0.45, imgsz=640, rect=False, verbose=False)[0]
    fam.conf = conf
    mine = fam.decode(out, prepared.meta, ["person"])
    assert 3 <= len(result.boxes) < 300, "the test needs a handful of people"
    assert len(mine) == len(result.boxes)
    errors = []
    for m, box, kpts in zip(mine, result.boxes.xyxy.tolist(), result.keypoints.data.tolist()):
        assert box_iou(m["box"], box) > 0.99
        for (x, y, s), (tx, ty, ts) in zip(m["keypoints"], kpts):
            errors.append(max(abs(x - tx), abs(y - ty)))
            assert abs(s - ts) < 1e-3
    # Ultralytics' executorch keypoint decoding (ours) and its PyTorch one (the predictor's)
    # round differently: within 0.5 % of the photo, and mostly within a pixel
    assert max(errors) < 0.005 * max(result.orig_shape), max(errors)
    assert sorted(errors)[len(errors) // 2] < 1.0


@pytest.mark.slow
def test_segmentation_masks_agree_with_ultralytics_predictor():
    from pteforge.families.segmentation import mask_iou
    from pteforge.models.ultralytics_models import to_export_mode
    from pteforge.families.vision import box_iou

    yolo, spec = _seeded("yolo11n-seg.yaml")
    fam = type(family("yolo-seg"))()  # its own instance: the test lowers its threshold
    ours = to_export_mode(copy.deepcopy(yolo.model))
    bus = next(p for p in shipped_images() if p.name == "bus.jpg")
    prepared = fam.prepare(bus, spec)
    with torch.no_grad():
        out = list(ours(prepared.tensor))
    conf = _threshold(out[0], fam.nc)
    result = yolo.predict(str(bus), conf=conf, iou=0.45, imgsz=640, rect=False, retina_masks=True, verbose=False)[0]
    fam.conf = conf
    mine = fam.decode(out, prepared.meta, None)
    assert 3 <= len(result.boxes) < 300
    # Ultralytics drops detections whose mask is empty; every one it keeps is ours too
    assert len(result.boxes) <= len(mine)
    ious = []
    for box, mask in zip(result.boxes.xyxy.tolist(), result.masks.data):
        [m] = [m for m in mine if box_iou(m["box"], box) > 0.99]
        theirs = mask.bool()
        if int(theirs.sum()) > 2000:
            ious.append(mask_iou(torch.from_numpy(m["_mask"]), theirs))
    assert ious and sum(ious) / len(ious) > 0.9, ious
