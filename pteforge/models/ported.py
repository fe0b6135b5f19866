"""The models the seed converts from TensorFlow: BlazeFace from PINTO's model zoo, MoveNet
from TF Hub. Each family's factory: its pretrained weights as the seed gets them (a
published ONNX file imported with onnx2torch), or its architecture (in its family) with
random weights for ``--weights none``."""

from __future__ import annotations

import io
import tarfile

import torch

from ..core.errors import WeightsError, one_line
from ..core.io import cache_root, write_atomic
from ..core.spec import WEIGHTS_PRETRAINED
from ..families.blazeface import BlazeFaceNet
from ..families.movenet import SIZES, MoveNetNet
from .weights import initialise


def build_blazeface(spec, weights: str, seed: int):
    if weights == WEIGHTS_PRETRAINED:
        return from_pinto_zoo()
    torch.manual_seed(seed)
    return initialise(BlazeFaceNet(), spec, weights, seed)


# What the seed's exporter downloads: PINTO's model zoo archive, whose 01_float32 archive
# holds MediaPipe's front model converted to ONNX (NHWC input).
PINTO_ARCHIVE = "https://s3.ap-northeast-2.wasabisys.com/pinto-model-zoo/030_BlazeFace/resources.tar.gz"


def from_pinto_zoo():
    """MediaPipe's weights as the seed gets them, wrapped to take NCHW input."""
    path = cache_root() / "weights" / "face_detection_front_128x128_float32.onnx"
    if not path.exists():
        try:
            archive = cache_root() / "weights" / "pinto_030_BlazeFace.tar.gz"
            if not archive.exists():
                archive.parent.mkdir(parents=True, exist_ok=True)
                torch.hub.download_url_to_file(PINTO_ARCHIVE, str(archive), progress=False)
            with tarfile.open(archive, "r:gz") as outer:
                member = next(m for m in outer.getmembers() if m.name.endswith("01_float32/resources_new.tar.gz"))
                packed = outer.extractfile(member)
                assert packed is not None  # a file in the archive (else: the WeightsError below)
                inner = tarfile.open(fileobj=io.BytesIO(packed.read()), mode="r:gz")
            onnx = next(m for m in inner.getmembers() if "128x128" in m.name and m.name.endswith("float32.onnx"))
            unpacked = inner.extractfile(onnx)
            assert unpacked is not None  # a file in the archive, as above
            write_atomic(path, unpacked.read())
        except Exception as exc:
            raise WeightsError(f"cannot download or unpack BlazeFace's ONNX model from {PINTO_ARCHIVE} ({one_line(exc, 120)})",
                               fix="use --weights none to build the architecture with random weights") from None
    from .onnx.build import onnx_file_model  # onnx2torch: 1.9 s beyond torch, for pretrained weights only

    return onnx_file_model(path, "blazeface", nhwc=True)  # the file takes NHWC, as TensorFlow Lite


def build_movenet(spec, weights: str, seed: int):
    if weights == WEIGHTS_PRETRAINED:
        return from_tf_hub(spec.name)
    torch.manual_seed(seed)
    return initialise(MoveNetNet(width=1.75 if spec.name.endswith("thunder") else 1.0), spec, weights, seed, batch=4)


def from_tf_hub(name: str):
    """The seed's path: MoveNet's SavedModel from TF Hub, converted with tf2onnx (opset 13)
    and imported with onnx2torch, wrapped to take pteforge's float NHWC input (the SavedModel
    takes int32)."""
    variant, size = name.removeprefix("movenet_"), SIZES[name]
    path = cache_root() / "weights" / f"movenet_{variant}_tfhub4.onnx"
    if not path.exists():
        try:
            import tensorflow as tf
            import tensorflow_hub as hub
            import tf2onnx
        except ImportError:
            raise WeightsError(f"{name}'s weights are a TF Hub SavedModel; converting it needs tensorflow, tensorflow_hub "
                               "and tf2onnx, which are not installed",
                               fix="pip install tensorflow tensorflow_hub tf2onnx, or use --weights none to build the "
                                   "architecture with random weights") from None
        try:
            signature = hub.load(f"https://tfhub.dev/google/movenet/singlepose/{variant}/4").signatures["serving_default"]
            path.parent.mkdir(parents=True, exist_ok=True)
            tf2onnx.convert.from_function(signature, input_signature=[tf.TensorSpec([1, size, size, 3], tf.int32, name="input")],
                                          opset=13, output_path=str(path))
        except Exception as exc:
            raise WeightsError(f"cannot download or convert {name} from TF Hub ({one_line(exc, 120)})",
                               fix="use --weights none to build the architecture with random weights") from None
    from .onnx.build import onnx_file_model  # onnx2torch: 1.9 s beyond torch, for pretrained weights only

    return onnx_file_model(path, name, int_input=True)  # the SavedModel takes int32 NHWC
