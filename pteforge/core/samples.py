"""A user's own input samples: a directory of ``.npy`` / ``.npz`` files, one sample a file,
for a model whose inputs are not photos (audio windows, token ids, a file's bytes, a
sensor's frames, or images already preprocessed).

``--calibration DIR`` with such files verifies every target on ``1 + --verify-inputs`` of
them and calibrates quantized targets on up to ``--calibration-samples`` others (sorted by
path, calibration's first), so the verdict is on real inputs calibration did not see. A ``.npy`` file is the one
input of a one-input model; a ``.npz`` file holds one array per input, named as the
model's inputs are (an ONNX file's input names) or ``arr_0``, ``arr_1``, ... in order
(``numpy.savez(path, *arrays)``). An array may leave out a batch dimension of 1.
"""

from __future__ import annotations

from pathlib import Path

from .errors import UsageError

SUFFIXES = (".npy", ".npz")
FIX = ("save one sample a file: numpy.save('x.npy', array) for a one-input model, or "
       "numpy.savez('x.npz', name=array, ...) with one array per input")


def sample_files(directory: Path) -> list[Path]:
    """The sample files under ``directory``, sorted by path (hidden files left out)."""
    directory = Path(directory)
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
                  and not any(part.startswith(".") for part in p.relative_to(directory).parts))


def holds_samples(directory) -> bool:
    """Whether ``directory`` holds input sample files (rather than photos)."""
    return directory is not None and Path(directory).is_dir() and bool(sample_files(Path(directory)))


def split(config) -> tuple[list[Path], list[Path]]:
    """(the files calibration uses, the files after them that verification uses) of
    ``config.calibration_dir``: verification keeps up to ``1 + verify_inputs`` files, and
    calibration takes up to ``calibration_samples`` of the others (at least one)."""
    files = sample_files(Path(config.calibration_dir))
    verify = 1 + max(config.verify_inputs, 0)
    calibrate = max(min(config.calibration_samples, len(files) - verify), 1)
    return files[:calibrate], files[calibrate:calibrate + verify]


def load(path: Path, spec) -> tuple:
    """One sample file as the model's fed inputs, in order, as tensors of their dtypes.
    A file that cannot be read, or whose arrays do not fit the inputs, is refused in one
    line naming the file, the input and what it expects."""
    import numpy as np
    import torch

    fed = spec.fed
    names = [i.name or f"input {k}" for k, i in enumerate(fed)]
    try:
        if path.suffix.lower() == ".npy":
            if len(fed) != 1:
                raise UsageError(f"{path}: a .npy file holds one array, and the model takes {len(fed)} inputs "
                                 f"({', '.join(names)})", fix=FIX)
            arrays = [np.load(path, allow_pickle=False)]
        else:
            with np.load(path, allow_pickle=False) as held:
                keys = list(held.files)
                if all(i.name in keys for i in fed if i.name) and all(i.name for i in fed):
                    arrays = [held[i.name] for i in fed]
                elif keys == [f"arr_{k}" for k in range(len(fed))]:
                    arrays = [held[k] for k in keys]
                else:
                    raise UsageError(f"{path} holds arrays {', '.join(keys) or 'none'}; the model's inputs are "
                                     f"{', '.join(names)}", fix=FIX)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - numpy's own reasons: not an array file, pickled objects, truncated
        raise UsageError(f"{path} is not a readable numpy file: {str(exc).splitlines()[0]}", fix=FIX) from exc
    return tuple(_fit(torch.from_numpy(np.ascontiguousarray(a)), i, name, path) for a, i, name in zip(arrays, fed, names))


def _fit(tensor, inp, name: str, path: Path):
    """``tensor`` as input ``inp`` takes it: a batch dimension of 1 added where left out,
    cast within its kind (float64 to float32, int32 to int64); anything else refused."""
    import torch

    want = tuple(inp.shape)
    if tuple(tensor.shape) != want and want[:1] == (1,) and tuple(tensor.shape) == want[1:]:
        tensor = tensor.unsqueeze(0)
    if tuple(tensor.shape) != want:
        raise UsageError(f"{path}: {name} has shape {tuple(tensor.shape)}, and the model takes {want}",
                         fix="save arrays of the input shapes the model is exported with (--input-shape)")
    dtype = getattr(torch, inp.dtype)
    kinds = (dtype.is_floating_point, tensor.dtype.is_floating_point)
    if kinds[0] != kinds[1] or (dtype == torch.bool) != (tensor.dtype == torch.bool):
        raise UsageError(f"{path}: {name} is {str(tensor.dtype).replace('torch.', '')}, and the model takes {inp.dtype}",
                         fix=f"save {name} as {inp.dtype}")
    return tensor.to(dtype)
