"""Image pre- and post-processing as an app does it: classification and YOLO detection."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


def shipped_images() -> list[Path]:
    """Real photos that our dependencies ship: Ultralytics' bus.jpg and zidane.jpg,
    Matplotlib's grace_hopper.jpg, scikit-learn's china.jpg and flower.jpg (those
    that are installed)."""
    import importlib.util

    found: list[Path] = []
    for package, folder in (("ultralytics", "assets"), ("matplotlib", "mpl-data/sample_data"), ("sklearn", "datasets/images")):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        assets = Path(list(spec.submodule_search_locations)[0]) / folder
        if assets.is_dir():
            found.extend(sorted(p for p in assets.iterdir() if p.suffix.lower() in (".jpg", ".jpeg")))
    return found


def images_in(directory: Path) -> list[Path]:
    """The files under ``directory`` that decode as images, sorted."""
    return scan_images(directory)[0]


def scan_images(directory: Path) -> tuple[list[Path], list[Path]]:
    """(files that decode as images, files that do not) under ``directory``, sorted.

    Hidden files are ignored; every other file is one or the other, so nothing in
    the directory is skipped without being named."""
    from PIL import Image, UnidentifiedImageError

    good, bad = [], []
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file()):
        if any(part.startswith(".") for part in path.relative_to(directory).parts):
            continue
        try:
            with Image.open(path) as img:
                img.verify()
            good.append(path)
        except (OSError, UnidentifiedImageError, SyntaxError, ValueError):
            bad.append(path)
    return good, bad


def image_dir(directory, flag: str) -> tuple[list[Path], str | None]:
    """The readable images of a user's ``flag DIR`` and a one-line note naming the files
    that are not; a usage error when there is no readable image at all."""
    from .errors import UsageError

    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{flag} {directory} is not a directory", fix="give a directory of photos (.jpg, .png, ...)")
    good, bad = scan_images(directory)
    names = ", ".join(p.relative_to(directory).as_posix() for p in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
    if not good:
        what = f"none of its {len(bad)} file(s) is a readable image ({names})" if bad else "it holds no files"
        raise UsageError(f"{flag} {directory}: {what}", fix="give a directory of photos (.jpg, .png, ...)")
    note = f"{flag} {directory}: skipping {len(bad)} file(s) that are not readable images: {names}" if bad else None
    return good, note


def classification_input(path, pre: dict):
    """Resize the shorter side, centre crop, scale to [0, 1], normalise (torchvision's recipe).

    ``path`` is an image file or a PIL image."""
    import torch
    from PIL import Image
    from torchvision.transforms import functional as F

    img = path.convert("RGB") if isinstance(path, Image.Image) else Image.open(path).convert("RGB")
    img = F.resize(img, pre.get("resize") or pre["size"])
    img = F.center_crop(img, pre["size"])
    x = F.to_tensor(img)
    x = F.normalize(x, pre["mean"], pre["std"])
    return x.unsqueeze(0).to(torch.float32)


@dataclass
class Letterbox:
    gain: float
    pad: tuple[float, float]  # (left, top)
    shape: tuple[int, int]  # original (h, w)


def detection_input(path, size: int):
    """Letterbox to ``size`` with padding 114, RGB, [0, 1], NCHW — as Ultralytics does.

    ``path`` is an image file or a PIL image."""
    import cv2
    import numpy as np
    import torch
    from PIL import Image

    if isinstance(path, Image.Image):
        bgr = np.ascontiguousarray(np.asarray(path.convert("RGB"))[..., ::-1])
    else:
        bgr = cv2.imread(str(path))
    if bgr is None:
        raise ValueError(f"cannot read image {path}")
    h, w = bgr.shape[:2]
    gain = min(size / h, size / w)
    nw, nh = int(round(w * gain)), int(round(h * gain))
    dw, dh = (size - nw) / 2, (size - nh) / 2
    if (nw, nh) != (w, h):
        bgr = cv2.resize(bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    bgr = cv2.copyMakeBorder(bgr, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(114, 114, 114))
    rgb = np.ascontiguousarray(bgr[..., ::-1].transpose(2, 0, 1))
    x = torch.from_numpy(rgb).float().div(255.0).unsqueeze(0)
    return x, Letterbox(gain, (left, top), (h, w))


def model_input(image, spec):
    """One image (file or PIL image) → the model's input tensor, by its own preprocessing."""
    from dataclasses import asdict

    pre = spec.preprocessing
    if pre.letterbox:
        return detection_input(image, pre.size)[0]
    return classification_input(image, asdict(pre))


def takes_images(spec) -> bool:
    """A model whose only input is one image batch with a known preprocessing."""
    return spec.preprocessing is not None and len(spec.inputs) == 1 and len(spec.inputs[0].shape) == 4


def image_views(path: Path, count: int, seed: int) -> list:
    """``count`` seeded random views of a photo (crop of 40–100 % of it, maybe mirrored),
    so calibration sees real image statistics without reusing the validation view."""
    import random

    from PIL import Image, ImageOps

    rng = random.Random(f"{seed}:{Path(path).name}")
    img = Image.open(path).convert("RGB")
    w, h = img.size
    views = []
    for _ in range(count):
        scale = rng.uniform(0.4, 1.0)
        cw, ch = max(int(w * scale), 16), max(int(h * scale), 16)
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        view = img.crop((x, y, x + cw, y + ch))
        views.append(ImageOps.mirror(view) if rng.random() < 0.5 else view)
    return views


@dataclass
class Detection:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in original image pixels
    score: float
    cls: int
    anchor: int = -1  # column of the head output it came from

    def to_dict(self, names: list[str] | None = None) -> dict:
        d = {"box": [round(v, 1) for v in self.box], "score": round(self.score, 4), "class": self.cls}
        if names and self.cls < len(names):
            d["name"] = names[self.cls]
        return d


def decode_yolo(
    out, lb: Letterbox, conf: float = 0.25, iou: float = 0.45, max_det: int = 300
) -> list[Detection]:
    """Decode a (1, 4 + classes, anchors) YOLO head: boxes are cx, cy, w, h in input pixels.

    Best class per anchor, confidence threshold, class-aware NMS, then boxes mapped
    back through the letterbox to the original image and clipped to it.
    """
    import torch
    import torchvision

    pred = out[0] if out.dim() == 3 else out
    pred = pred.transpose(0, 1).float()  # (anchors, 4 + nc)
    scores, classes = pred[:, 4:].max(1)
    keep = scores > conf
    anchors = torch.nonzero(keep).flatten()
    pred, scores, classes = pred[keep], scores[keep], classes[keep]
    cx, cy, w, h = pred[:, 0], pred[:, 1], pred[:, 2], pred[:, 3]
    boxes = torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), 1)
    idx = torchvision.ops.batched_nms(boxes, scores, classes, iou)[:max_det]
    boxes, scores, classes, anchors = boxes[idx], scores[idx], classes[idx], anchors[idx]
    boxes[:, [0, 2]] = ((boxes[:, [0, 2]] - lb.pad[0]) / lb.gain).clamp(0, lb.shape[1])
    boxes[:, [1, 3]] = ((boxes[:, [1, 3]] - lb.pad[1]) / lb.gain).clamp(0, lb.shape[0])
    return [
        Detection(tuple(b.tolist()), float(s), int(c), int(a))
        for b, s, c, a in zip(boxes, scores, classes, anchors)
    ]


def anchor_agreement(reference: list[Detection], out, lb: Letterbox, iou: float = 0.9, tie: float = 1e-3) -> float:
    """Fraction of reference boxes that the program reproduces at the same anchor: a box
    with IoU ≥ ``iou`` whose score for the reference class is its best (within ``tie``).

    Robust where NMS and argmax are not: with random weights many class scores are
    equal to 1e-6, and which one wins says nothing about the program.
    """
    if not reference:
        return 1.0
    pred = (out[0] if out.dim() == 3 else out).transpose(0, 1).float()
    hits = 0
    for det in reference:
        row = pred[det.anchor]
        cx, cy, w, h = row[:4].tolist()
        box = (
            (cx - w / 2 - lb.pad[0]) / lb.gain, (cy - h / 2 - lb.pad[1]) / lb.gain,
            (cx + w / 2 - lb.pad[0]) / lb.gain, (cy + h / 2 - lb.pad[1]) / lb.gain,
        )
        box = (
            min(max(box[0], 0), lb.shape[1]), min(max(box[1], 0), lb.shape[0]),
            min(max(box[2], 0), lb.shape[1]), min(max(box[3], 0), lb.shape[0]),
        )
        scores = row[4:]
        same_class = float(scores[det.cls]) >= float(scores.max()) - tie
        hits += int(same_class and box_iou(det.box, box) >= iou)
    return hits / len(reference)


def box_iou(a, b) -> float:
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    if min(area_a, area_b) < 1.0:  # degenerate (clipped flat at an image edge): same within a pixel
        return float(all(abs(x - y) < 1.0 for x, y in zip(a, b)))
    ix1, iy1, ix2, iy2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, ix2 - ix1) * max(0.0, iy2 - iy1)
    return inter / (area_a + area_b - inter)


def matched_fraction(reference: list[Detection], candidate: list[Detection], iou: float = 0.9) -> float:
    """Fraction of reference boxes matched by a same-class candidate box with IoU ≥ ``iou``."""
    if not reference:
        return 1.0 if not candidate else 0.0
    used: set[int] = set()
    hits = 0
    for r in reference:
        best, best_iou = None, iou
        for j, c in enumerate(candidate):
            if j in used or c.cls != r.cls:
                continue
            v = box_iou(r.box, c.box)
            if v >= best_iou:
                best, best_iou = j, v
        if best is not None:
            used.add(best)
            hits += 1
    return hits / len(reference)


def top_k(logits, k: int = 5, names: list[str] | None = None) -> list[dict]:
    import torch

    probs = torch.softmax(logits.flatten().float(), 0)
    values, indices = torch.topk(probs, min(k, probs.numel()))
    return [
        {"class": int(i), "name": names[int(i)] if names and int(i) < len(names) else str(int(i)), "prob": round(float(v), 5)}
        for v, i in zip(values, indices)
    ]
