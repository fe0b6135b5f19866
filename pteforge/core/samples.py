"""A user's own input samples: a directory of ``.npy`` / ``.npz`` files, one sample a file,
for a model whose inputs are not photos (audio windows, token ids, a file's bytes, a
sensor's frames, or images already preprocessed).

``--calibration DIR`` with such files verifies every target on ``1 + --verify-inputs`` of
them and calibrates quantized targets on up to ``--calibration-samples`` others (sorted by
path, calibration's first), so the verdict is on real inputs calibration did not see. A ``.npy`` file is the one
input of a one-input model; a ``.npz`` file holds one array per input, named as the
model's inputs are (an ONNX file's input names, a TorchScript forward's arguments) or ``arr_0``, ``arr_1``, ... in order
(``numpy.savez(path, *arrays)``). An array may leave out a batch dimension of 1.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .errors import UsageError
from .limits import check_archive
from .units import listed

if TYPE_CHECKING:
    import numpy
    import torch

    from .spec import ExportConfig, InputSpec, JobConfig, ModelSpec

SUFFIXES = (".npy", ".npz")
FIX = ("save one sample a file: numpy.save('x.npy', array) for a one-input model, or "
       "numpy.savez('x.npz', name=array, ...) with one array per input")


def _visible_files(directory: Path) -> list[Path]:
    """The files under ``directory``, sorted by path, hidden ones left out."""
    return sorted(p for p in directory.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts))


def sample_files(directory: Path) -> list[Path]:
    """The sample files under ``directory``, sorted by path (hidden files left out)."""
    return [p for p in _visible_files(Path(directory)) if p.suffix.lower() in SUFFIXES]


def skipped_note(directory: Path | str) -> str | None:
    """A one-line note naming the files of a samples ``directory`` that are not samples
    (a README, a .csv beside the .npy files): left out, and said to be."""
    directory = Path(directory)
    others = [p.relative_to(directory).as_posix() for p in _visible_files(directory) if p.suffix.lower() not in SUFFIXES]
    if not others:
        return None
    return f"--calibration {directory}: skipping {len(others)} file(s) that are not .npy or .npz samples: {listed(others, 8)}"


def holds_samples(directory: Path | str | None) -> bool:
    """Whether ``directory`` holds input sample files (rather than photos)."""
    return directory is not None and Path(directory).is_dir() and bool(sample_files(Path(directory)))


def split(config: ExportConfig | JobConfig) -> tuple[list[Path], list[Path]]:
    """(the files calibration uses, the files after them that verification uses) of
    ``config.calibration_dir``: verification keeps up to ``1 + verify_inputs`` files, and
    calibration takes up to ``calibration_samples`` of the others (at least one)."""
    assert config.calibration_dir is not None, "split() is for a --calibration DIR of sample files"
    files = sample_files(Path(config.calibration_dir))
    verify = 1 + max(config.verify_inputs, 0)
    calibrate = max(min(config.calibration_samples, len(files) - verify), 1)
    return files[:calibrate], files[calibrate:calibrate + verify]


def load(path: Path, spec: ModelSpec) -> tuple:
    """One sample file as the model's fed inputs, in order, as tensors of their dtypes.
    Each array's shape and dtype are read from its header first: a file that cannot be
    read, whose arrays do not fit the inputs, or whose header asks for more data than the
    file holds, is refused in one line naming the file, the input and what it expects,
    before its data is read. An ``.npz`` is judged by its zip directory before that
    (``limits.check_archive``). Pickled objects are never loaded."""
    import numpy as np
    import torch

    fed = spec.fed
    names = [i.name or f"input {k}" for k, i in enumerate(fed)]
    try:
        if path.suffix.lower() == ".npy":
            if len(fed) != 1:
                raise UsageError(f"{path}: a .npy file holds one array, and the model takes {len(fed)} inputs "
                                 f"({', '.join(names)})", fix=FIX)
            with path.open("rb") as f:
                _expect(path, names[0], fed[0], *header(f, path.stat().st_size))
            arrays = [np.load(path, allow_pickle=False)]
        else:
            keys = _npz_keys(path, fed, names)
            with np.load(path, allow_pickle=False) as held:
                arrays = [held[k] for k in keys]
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's own reasons: not an array file, truncated, not a zip
        raise UsageError(f"{path} is not a readable numpy file: {str(exc).splitlines()[0]}", fix=FIX) from exc
    native = [np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("=")) for a in arrays]  # torch takes no '>f4'
    tensors = tuple(_fit(torch.from_numpy(a), i) for a, i in zip(native, fed))
    for name, t in zip(names, tensors):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            k = int((~torch.isfinite(t.flatten())).nonzero()[0])
            what = "NaN" if math.isnan(float(t.flatten()[k])) else f"an infinity (as {str(t.dtype).removeprefix('torch.')})"
            raise UsageError(f"{path}: {name} holds {what} at index {k}: no output on it can be compared with eager's",
                             fix=f"save finite values in {name}")
    return tensors


def header(f: IO[bytes], size: int) -> tuple[tuple[int, ...], numpy.dtype]:
    """(shape, dtype) from the header of the ``.npy`` data at ``f``'s position, ``size``
    bytes long; what follows it is not read. Refused: a dtype holding Python objects (a
    pickle), and a header declaring more data than ``size`` leaves after it."""
    from numpy.lib import format as npy

    start = f.tell()
    version = npy.read_magic(f)
    if version not in ((1, 0), (2, 0)):
        raise ValueError(f".npy format version {version[0]}.{version[1]} (numpy.save writes 1.0 or 2.0)")
    read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
    shape, _, dtype = read(f)
    if dtype.hasobject:
        raise ValueError("it holds Python objects (a pickle), which pteforge never loads")
    if any(d < 0 for d in shape):
        raise ValueError(f"its header declares a negative dimension: {tuple(shape)}")
    declared = math.prod(shape) * dtype.itemsize
    held = size - (f.tell() - start)
    if declared > held:
        raise ValueError(f"its header declares {declared} bytes of {dtype} {tuple(shape)}, and {held} follow it")
    return tuple(int(d) for d in shape), dtype


def _npz_keys(path: Path, fed: tuple[InputSpec, ...], names: list[str]) -> list[str]:
    """The arrays of ``.npz`` file ``path`` that are the model's inputs, in order, once its
    zip directory and each one's header have passed."""
    members = {m.filename.removesuffix(".npy"): m for m in check_archive(path)}
    keys = list(members)
    if all(i.name in keys for i in fed if i.name) and all(i.name for i in fed):
        chosen = [i.name for i in fed if i.name]  # every one has a name here
    elif keys == [f"arr_{k}" for k in range(len(fed))]:
        chosen = keys
    else:
        raise UsageError(f"{path} holds arrays {', '.join(keys) or 'none'}; the model's inputs are "
                         f"{', '.join(names)}", fix=FIX)
    with zipfile.ZipFile(path) as archive:
        for key, inp, name in zip(chosen, fed, names):
            with archive.open(members[key]) as f:  # inflates the header alone
                try:
                    found = header(f, members[key].file_size)
                except ValueError as exc:
                    raise ValueError(f"array {key}: {exc}") from None
            _expect(path, name, inp, *found)
    return chosen


def _expect(path: Path, name: str, inp: InputSpec, shape: tuple[int, ...], dtype: numpy.dtype) -> None:
    """An array of ``shape`` and numpy ``dtype``, judged as input ``inp`` takes it: its
    shape, or the shape without its leading 1 (a batch dimension left out); a dtype of
    the input's kind (float, integer, bool)."""
    want = tuple(inp.shape)
    if shape != want and not (want[:1] == (1,) and shape == want[1:]):
        raise UsageError(f"{path}: {name} has shape {shape}, and the model takes {want}",
                         fix="save arrays of the input shapes the model is exported with (--input-shape)")
    if KINDS.get(dtype.kind) != _kind(inp.dtype):
        raise UsageError(f"{path}: {name} is {dtype.name}, and the model takes {inp.dtype}",
                         fix=f"save {name} as {inp.dtype}")


KINDS = {"f": "float", "i": "integer", "u": "integer", "b": "bool"}  # numpy's dtype kinds fed; not complex, text


def _kind(dtype: str) -> str:
    """The kind of a dtype torch names (an input's): float, bool or integer."""
    if dtype == "bool":
        return "bool"
    return "float" if dtype.startswith(("float", "bfloat")) else "integer"


def _fit(tensor: torch.Tensor, inp: InputSpec) -> torch.Tensor:
    """``tensor`` (its shape and dtype judged by ``_expect``) as input ``inp`` takes it: a
    batch dimension of 1 added where left out, cast within its kind (float64 to float32,
    int32 to int64)."""
    import torch

    if tuple(tensor.shape) != tuple(inp.shape):
        tensor = tensor.unsqueeze(0)
    return tensor.to(getattr(torch, inp.dtype))


TOKEN_ID_DTYPES = ("int64", "int32")
TOKEN_IDS_NOTE = ("calibrated on synthetic token ids: the calibration data is not representative of real text "
                  "(give real ids: --calibration DIR of .npy/.npz files)")


def token_ids(spec: ModelSpec) -> list[str]:
    """The fed inputs of ``spec`` that are token ids, by name (``input K`` where unnamed):
    integer tensors (int64, int32), which a text model feeds to an embedding. Seeded
    synthetic ids are not text: static int8 calibrated on them is not calibrated on what the
    model will see (a scripted BERT's int8 ended 3-5 dB from eager)."""
    return [i.name or f"input {k}" for k, i in enumerate(spec.fed) if i.dtype in TOKEN_ID_DTYPES and i.shape]
