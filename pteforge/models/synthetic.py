"""Seeded synthetic inputs: image-like tensors that follow a model's preprocessing."""

from __future__ import annotations

from ..core.spec import ModelSpec
from ..families import model_input
from ..families.vision import image_views, shipped_images, takes_images

# Seeded integer inputs are ids in [0, INTEGER_HIGH): a valid index into any embedding,
# gather or one-hot of at least this many rows (ids up to 99 failed a traced model whose
# embedding has 50 rows: "index out of range"); bench and validate draw the same range.
INTEGER_HIGH = 10


def integer_high(dtype) -> int:
    """The values a seeded input of integer ``dtype`` is drawn below: bytes (``uint8``, an
    app's RGB pixels) span all 256 of theirs, booleans 2, ids INTEGER_HIGH."""
    import torch

    return 256 if dtype == torch.uint8 else 2 if dtype == torch.bool else INTEGER_HIGH


def _smooth(shape: list[int], nhwc: bool, gen):
    """Image-like content in [0, 1] of an NCHW (or NHWC) ``shape``: coarse colour fields,
    upsampled, with a little noise."""
    import torch

    n, c, h, w = (shape[0], shape[3], shape[1], shape[2]) if nhwc else shape
    coarse = torch.rand(n, c, max(h // 16, 2), max(w // 16, 2), generator=gen)
    img = torch.nn.functional.interpolate(coarse, size=(h, w), mode="bilinear", align_corners=False)
    return (img + 0.1 * torch.rand(n, c, h, w, generator=gen)).clamp(0, 1)


def make_inputs(spec: ModelSpec, seed: int, batch: int | None = None) -> tuple:
    """One tuple of example inputs for ``spec``, deterministic in ``seed``.

    Image models get smooth, image-like content in [0, 1] passed through the
    model's own normalisation, not white noise: activations then resemble those
    of real photos, which matters for BatchNorm estimation and calibration.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = []
    for inp in spec.fed:
        shape = list(inp.shape)
        if batch is not None:
            shape[0] = batch
        dtype = getattr(torch, inp.dtype)
        if dtype.is_floating_point and len(shape) == 4 and spec.preprocessing is not None:
            pre = spec.preprocessing
            nhwc = pre.layout == "NHWC"
            c = shape[3] if nhwc else shape[1]
            img = _smooth(shape, nhwc, gen) * 255.0 * pre.scale
            # the shape given, never widened: a normalisation of 3 channels over an input of 1 takes
            # the channels' mean (broadcasting it would capture the program at 3 channels)
            mean, std = (torch.tensor(v) for v in (pre.mean, pre.std))
            if c != len(mean):
                mean, std = mean.mean().repeat(c), std.mean().repeat(c)
            mean, std = mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1)
            img = (img - mean) / std
            out.append((img.permute(0, 2, 3, 1).contiguous() if nhwc else img).to(dtype))
        elif dtype.is_floating_point:
            out.append(torch.randn(*shape, generator=gen).to(dtype))
        elif dtype == torch.uint8 and len(shape) == 4:  # an image of bytes (an app's RGB pixels)
            nhwc = (spec.preprocessing.layout == "NHWC" if spec.preprocessing is not None
                    else shape[3] in (1, 3, 4) and shape[1] not in (1, 3, 4))
            img = _smooth(shape, nhwc, gen)
            out.append(((img.permute(0, 2, 3, 1) if nhwc else img) * 255.0).round().to(dtype).contiguous())
        else:
            out.append(torch.randint(0, inp.high or integer_high(dtype), shape, generator=gen).to(dtype))
    return tuple(out)


def statistics_batch(spec: ModelSpec, seed: int, batch: int) -> tuple:
    """A batch for estimating BatchNorm statistics of randomly initialised weights:
    for image models half real photo views (the photos our dependencies ship, through
    the model's preprocessing) and half seeded synthetic images, so the network is
    normalised for both kinds of input it is verified and calibrated on."""
    import torch


    photos = shipped_images() if takes_images(spec) else []
    if not photos:
        return make_inputs(spec, seed, batch=batch)
    n_photo = batch // 2
    views = [image_views(photos[(seed + k) % len(photos)], 1, seed * 31 + k)[0] for k in range(n_photo)]
    real = torch.cat([model_input(v, spec) for v in views])
    (synthetic,) = make_inputs(spec, seed, batch=batch - n_photo)
    return (torch.cat([real, synthetic]),)
