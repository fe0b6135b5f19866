"""Image pre- and post-processing as an app does it: classification and YOLO detection."""

from __future__ import annotations

import functools
import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..core.units import listed

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


def installed(package: str, *parts: str) -> Path | None:
    """A file or folder shipped inside an installed package, found without importing it
    (torchvision and Ultralytics import torch: seconds, for a photo or a list of names);
    None when the package or the path is not there."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    return path if path.exists() else None


def shipped_images() -> list[Path]:
    """Real photos that our dependencies ship: Ultralytics' bus.jpg and zidane.jpg,
    Matplotlib's grace_hopper.jpg, scikit-learn's china.jpg and flower.jpg (those
    that are installed)."""
    found: list[Path] = []
    for package, folder in (("ultralytics", "assets"), ("matplotlib", "mpl-data/sample_data"), ("sklearn", "datasets/images")):
        assets = installed(package, *folder.split("/"))
        if assets is not None and assets.is_dir():
            found.extend(sorted(p for p in assets.iterdir() if p.suffix.lower() in (".jpg", ".jpeg")))
    return found


def images_in(directory: Path, need: int | None = None) -> list[Path]:
    """The first ``need`` (or all) files under ``directory`` that decode as images, sorted."""
    return scan_images(directory, need)[0][:need]


def scan_images(directory: Path, need: int | None = None) -> tuple[list[Path], list[Path]]:
    """(files that decode as images, files that do not) under ``directory``, sorted, its
    subdirectories taken in turn (``_in_turn``: the first N of a dataset laid out a
    directory per class are from every class, not all from the first).

    Hidden files are ignored; every other file is one or the other, so nothing in
    the directory is skipped without being named. Files are decoded whole until
    ``need`` good ones are found (all, when None): a truncated JPEG passes PIL's
    ``verify()``, and failed the calibration that read it ("image file is truncated");
    the files after those are only verified, since none of them is read. A run asks
    for the same directory several times (the command line, each target's cache key):
    the answer is kept for as long as no file changes (path, size, modification time)."""
    files = []
    for path in _in_turn(sorted(p for p in Path(directory).rglob("*") if p.is_file())):
        if not any(part.startswith(".") for part in path.relative_to(directory).parts):
            stat = path.stat()
            files.append((path, stat.st_size, stat.st_mtime_ns))
    good, bad = _scanned(tuple(files), need)
    return list(good), list(bad)


def _in_turn(paths: list[Path]) -> list[Path]:
    """``paths`` (sorted) with their directories taken in turn: each one's first file, then
    each one's second, ...; a flat directory's as they are."""
    groups: dict[Path, list[Path]] = {}
    for path in paths:
        groups.setdefault(path.parent, []).append(path)
    return [g[i] for i in range(max(map(len, groups.values()), default=0)) for g in groups.values() if i < len(g)]


@functools.lru_cache(maxsize=16)
def _scanned(files: tuple, need: int | None) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    from PIL import Image

    good: list[Path] = []
    bad: list[Path] = []
    for path, _size, _mtime in files:
        try:
            with Image.open(path) as img:
                if need is None or len(good) < need:
                    img.load()
                else:
                    img.verify()
            good.append(path)
        except Exception:  # noqa: BLE001 -- any decoder failure, including from a third-party
            bad.append(path)  # patch of Image.open (Ultralytics' HEIF plugin install), names the file
    return tuple(good), tuple(bad)


def image_dir(directory, flag: str, need: int | None = None) -> tuple[list[Path], str | None]:
    """The readable images of a user's ``flag DIR`` (the first ``need`` decoded whole) and
    a one-line note naming the files that are not; a usage error when there is no
    readable image at all."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UsageError(f"{flag} {directory} is not a directory", fix="give a directory of photos (.jpg, .png, ...)")
    good, bad = scan_images(directory, need)
    names = listed((p.relative_to(directory).as_posix() for p in bad), 8)
    if not good:
        what = f"none of its {len(bad)} file(s) is a readable image ({names})" if bad else "it holds no files"
        raise UsageError(f"{flag} {directory}: {what}", fix="give a directory of photos (.jpg, .png, ...)")
    note = f"{flag} {directory}: skipping {len(bad)} file(s) that are not readable images: {names}" if bad else None
    return good, note


@dataclass
class Letterbox:
    """How input pixels map back to the photo: x_photo = (x - pad[0]) / gain (y likewise,
    with ``gain_y`` when the sides were scaled differently)."""

    gain: float
    pad: tuple[float, float]  # (left, top); negative: cropped away
    shape: tuple[int, int]  # original (h, w)
    gain_y: float | None = None

    def to_photo(self, x, y):
        return (x - self.pad[0]) / self.gain, (y - self.pad[1]) / (self.gain_y or self.gain)


def _rgb(image):
    """A photo (file or PIL image) as 8-bit RGB, upright: EXIF orientation applied, and
    16-bit or float pixels scaled to 8 bits, as OpenCV's ``imread`` (the detection
    families' reader) does. PIL alone fed a phone's portrait photo sideways and clipped a
    16-bit PNG to white, so one photo gave the families two different inputs."""
    import numpy as np
    from PIL import Image, ImageOps

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    img: Image.Image  # opened as an ImageFile, then transposed and rebuilt as plain images
    with Image.open(image) as img:
        img = ImageOps.exif_transpose(img)
        if img.mode.startswith("I") or img.mode == "F":
            pixels = np.asarray(img, dtype=np.float64)
            top = pixels.max(initial=0.0)
            if img.mode.startswith("I;16") or top > 255:
                pixels = pixels / 256 if top < 65536 else pixels * (255 / top)
            elif img.mode == "F" and top <= 1.0:
                pixels = pixels * 255
            img = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        return img.convert("RGB")


def detection_input(path, size: int):
    """Letterbox to ``size`` with padding 114, RGB, [0, 1], NCHW — as Ultralytics does.

    ``path`` is an image file or a PIL image."""
    import cv2
    import numpy as np
    import torch
    from PIL import Image

    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)  # its warning on a TIFF it cannot read
    bgr = None if isinstance(path, Image.Image) else cv2.imread(str(path))
    if bgr is None:  # a PIL image, or a file OpenCV cannot read (a float TIFF) but PIL can
        bgr = np.ascontiguousarray(np.asarray(_rgb(path))[..., ::-1])
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


def prepare_image(image, pre):
    """A photo (file or PIL image) through a model's ``Preprocessing``: (input tensor, the
    ``Letterbox`` that maps input pixels back to the photo)."""
    import torch
    from torchvision.transforms import functional as F

    if pre.fit == "letterbox":
        x, frame = detection_input(image, pre.size)
        x = x * 255.0 * pre.scale
    else:
        img = _rgb(image)
        w, h = img.size
        if pre.fit == "stretch":
            img = F.resize(img, [pre.size, pre.size])
            frame = Letterbox(pre.size / w, (0.0, 0.0), (h, w), gain_y=pre.size / h)
        else:  # crop: torchvision's recipe
            short = pre.resize or pre.size
            img = F.resize(img, short)
            nw, nh = img.size
            img = F.center_crop(img, pre.size)
            gain = nw / w
            frame = Letterbox(gain, (-round((nw - pre.size) / 2.0), -round((nh - pre.size) / 2.0)), (h, w))
        x = F.to_tensor(img).unsqueeze(0)
        if pre.scale != 1 / 255.0:
            x = x * 255.0 * pre.scale
    if tuple(pre.mean) != (0.0, 0.0, 0.0) or tuple(pre.std) != (1.0, 1.0, 1.0):
        x = F.normalize(x, pre.mean, pre.std)
    if pre.layout == "NHWC":
        x = x.permute(0, 2, 3, 1).contiguous()
    return x.to(torch.float32), frame


def takes_images(spec) -> bool:
    """A model whose only input is one image batch with a known preprocessing."""
    return spec.preprocessing is not None and len(spec.inputs) == 1 and len(spec.inputs[0].shape) == 4


def image_views(path: Path, count: int, seed: int) -> list:
    """``count`` seeded random views of a photo (crop of 40–100 % of it, maybe mirrored),
    so calibration sees real image statistics without reusing the validation view."""
    from PIL import ImageOps

    rng = random.Random(f"{seed}:{Path(path).name}")
    img = _rgb(path)
    w, h = img.size
    views = []
    for _ in range(count):
        scale = rng.uniform(0.4, 1.0)
        cw, ch = max(int(w * scale), 16), max(int(h * scale), 16)
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        view = img.crop((x, y, x + cw, y + ch))
        views.append(ImageOps.mirror(view) if rng.random() < 0.5 else view)
    return views


def box_iou(a, b) -> float:
    """IoU of two x1, y1, x2, y2 boxes (corners in either order: random weights predict
    negative sizes)."""
    a = (min(a[0], a[2]), min(a[1], a[3]), max(a[0], a[2]), max(a[1], a[3]))
    b = (min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3]))
    area_a = (a[2] - a[0]) * (a[3] - a[1])
    area_b = (b[2] - b[0]) * (b[3] - b[1])
    if min(area_a, area_b) < 1.0:  # degenerate (clipped flat at an image edge): same within a pixel
        return float(all(abs(x - y) < 1.0 for x, y in zip(a, b)))
    ix1, iy1, ix2, iy2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, ix2 - ix1) * max(0.0, iy2 - iy1)
    return inter / (area_a + area_b - inter)


def draw_results(image, results: list[dict], dest) -> None:
    """``image`` with ``results`` drawn on it, saved to ``dest``: boxes with their name and
    score, keypoints (joined as COCO's skeleton when there are 17), masks as a tint, and a
    classifier's top-5 as text."""
    from PIL import Image, ImageDraw

    img = _rgb(image)
    palette = [(255, 56, 56), (50, 205, 50), (0, 144, 255), (255, 178, 29), (207, 72, 255), (0, 212, 187)]
    for k, r in enumerate(results):
        mask = r.get("_mask")
        if mask is not None:
            tint = Image.new("RGB", img.size, palette[k % len(palette)])
            img = Image.composite(Image.blend(img, tint, 0.45), img, Image.fromarray(mask.astype("uint8") * 255).resize(img.size))
    draw = ImageDraw.Draw(img)
    width = max(2, round(max(img.size) / 300))
    lines = []
    for k, r in enumerate(results):
        color = palette[k % len(palette)]
        if "box" in r:
            x1, y1, x2, y2 = r["box"]
            box = (min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2))
            draw.rectangle(box, outline=color, width=width)
            draw.text((box[0] + width, box[1] + width), f"{r.get('name', r.get('class', ''))} {r.get('score', 0):.2f}", fill=color)
        points = r.get("keypoints") or []
        if len(points) == 17:
            for a, b in COCO_SKELETON:
                if points[a][2] >= KEYPOINT_VISIBLE and points[b][2] >= KEYPOINT_VISIBLE:
                    draw.line([tuple(points[a][:2]), tuple(points[b][:2])], fill=color, width=width)
        for x, y, s in points:
            if s >= KEYPOINT_VISIBLE:
                draw.ellipse([x - 2 * width, y - 2 * width, x + 2 * width, y + 2 * width], fill=color)
        if "prob" in r:
            lines.append(f"{r.get('name', r.get('class'))}: {r['prob']:.3f}")
    for i, line in enumerate(lines):
        draw.text((8, 8 + 14 * i), line, fill=(255, 255, 255), stroke_width=2, stroke_fill=(0, 0, 0))
    Path(dest).parent.mkdir(parents=True, exist_ok=True)
    img.save(dest, quality=88)


KEYPOINT_VISIBLE = 0.5  # a keypoint is drawn when its score reaches this
# COCO's 17-keypoint skeleton (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles)
COCO_SKELETON = ((15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
                 (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6))
COCO_KEYPOINTS = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
                  "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
                  "right_knee", "left_ankle", "right_ankle")
# COCO's per-keypoint OKS constants
COCO_SIGMAS = (0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072, 0.062, 0.062, 0.107, 0.107, 0.087,
               0.087, 0.089, 0.089)
