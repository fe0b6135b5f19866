"""pteforge's patches of torchao 0.18.0 (the version uv.lock pins): the scale search of its
intx weight quantization, and the range search of its histogram observer.

Each patch checks, when applied, that torchao is ``VERSION`` and still has what it
replaces (``pteforge.patches.require``), and raises ``UpstreamChangedError`` otherwise;
each puts back what it replaced on exit.
"""

from __future__ import annotations

import contextlib

from . import replaced, require, source_changed, source_digest

LIBRARY, VERSION = "torchao", "0.18.0"


def check(patch: str, *targets: tuple) -> None:
    """Raise ``UpstreamChangedError`` unless torchao is ``VERSION`` and has each ``(object, attribute)``."""
    require(patch, LIBRARY, VERSION, __name__.rpartition(".")[2], *targets)


@contextlib.contextmanager
def scale_only_hqq_replaced(search):
    """Inside, torchao's intx weight quantization (``IntxWeightOnlyConfig`` and
    ``Int8DynamicActivationIntxWeightConfig`` with ``hqq_scale_only``) searches its scales
    with ``search`` instead of ``_choose_qparams_and_quantize_scale_only_hqq``:
    ``pteforge/text/hqq.py``'s ``scale_only_hqq``, row block by row block, the same numbers
    (``torch.equal``), a fifth of the time (24 s of Gemma 3 270M's 8da4w capture, its
    output matrix, on the critical path of every language model's 8da4w export)."""
    from torchao.quantization.quantize_.workflows.intx import intx_unpacked_to_int8_tensor as intx

    check("scale_only_hqq_replaced", (intx, "_choose_qparams_and_quantize_scale_only_hqq"))
    with replaced(intx, "_choose_qparams_and_quantize_scale_only_hqq", search):
        yield


# torchao's HistogramObserver._non_linear_param_search's source, whose steps ``histogram_search_on_floats`` takes
_HISTOGRAM_SEARCH_SOURCE = "9306a687"


@contextlib.contextmanager
def histogram_search_on_floats():
    """Inside, torchao's ``HistogramObserver`` searches an activation's int8 range with the
    steps of its own ``_non_linear_param_search`` on Python floats, instead of indexing a
    tensor at each step: the same range, exactly.

    The search walks its quantile bounds in steps of 1e-5 (up to 100,000 steps for each
    activation observed), each step comparing an element of the histogram's cumulative sum,
    a 0-dim float32 tensor, with a bound, a Python float: ~10 µs of tensor dispatch a
    step. It can be most of a static int8 quantization's time (Arm's, Cortex-M's,
    XNNPACK's and OpenVINO's observers): 11 of 14 s quantizing a 1-layer GPT-2 for TOSA
    (mobilenet_v3_small's searches end within a few steps: little there).
    torch compares in float32, the bound rounded to it (round half to even); here each sum
    ``s`` becomes the bounds in float64 where that comparison turns (``_turns``), so the
    same comparisons are made on floats. A histogram that is not float32, or not finite,
    is searched by torchao's own method. Used only while torchao's method is the one it was
    written from (its source digest); otherwise ``UpstreamChangedError``."""
    from torchao.quantization.pt2e.observer import HistogramObserver

    patch = "histogram_search_on_floats"
    check(patch, (HistogramObserver, "_non_linear_param_search"))
    original = HistogramObserver.__dict__["_non_linear_param_search"]
    known = source_digest(original)
    if known != _HISTOGRAM_SEARCH_SOURCE:
        raise source_changed(patch, LIBRARY, VERSION, __name__.rpartition(".")[2],
                             "torchao HistogramObserver._non_linear_param_search", (_HISTOGRAM_SEARCH_SOURCE, known))

    with replaced(HistogramObserver, "_non_linear_param_search", _search_on_floats(original)):
        yield


def _search_on_floats(original):
    """torchao's ``_non_linear_param_search`` (``original``) step for step, on floats."""
    import torch

    def search(self):
        if self.histogram.dtype != torch.float32:
            return original(self)
        assert self.histogram.size()[0] == self.bins, "bins mismatch"
        bin_width = (self.max_val - self.min_val) / self.bins
        total = torch.sum(self.histogram).item()
        turns = _turns(torch.cumsum(self.histogram, dim=0).cpu().numpy())
        if turns is None:
            return original(self)
        above, reached = turns  # cSum[i] < y ⟺ y >= above[i]; cSum[i] > y ⟺ y < reached[i] (y rounded as torch does)

        stepsize = 1e-5  # torchao's steps, on the same floats
        alpha, beta = 0.0, 1.0
        start_bin, end_bin = 0, self.bins - 1
        norm_min = float("inf")
        while alpha < beta:
            next_alpha = alpha + stepsize
            next_beta = beta - stepsize
            low, high = next_alpha * total, next_beta * total
            l, r = start_bin, end_bin
            while l < end_bin and low >= above[l]:
                l += 1
            while r > start_bin and high < reached[r]:
                r -= 1
            next_start_bin, next_end_bin = start_bin, end_bin
            if (l - start_bin) > (end_bin - r):
                next_start_bin = l
                alpha = next_alpha
            else:
                next_end_bin = r
                beta = next_beta
            if next_start_bin == start_bin and next_end_bin == end_bin:
                continue
            norm = self._compute_quantization_error(next_start_bin, next_end_bin)
            if norm > norm_min:
                break
            norm_min = norm
            start_bin, end_bin = next_start_bin, next_end_bin
        return self.min_val + bin_width * start_bin, self.min_val + bin_width * (end_bin + 1)

    return search


def _turns(sums):
    """For float32 values ``sums``: the least float64 ``y`` whose float32 rounding is above
    each (``above``), and the least whose rounding reaches it (``reached``), as lists; None
    where a value or a bound is not finite. float32 rounding is monotonic, so
    ``s < float32(y)`` ⟺ ``y >= above`` and ``s > float32(y)`` ⟺ ``y < reached``. A bound
    is the midpoint between ``s`` and its float32 neighbour when that midpoint itself
    rounds past ``s`` (a tie, to even), else the next float64 after it."""
    import numpy as np

    s = sums.astype(np.float32)
    if not np.isfinite(s).all():
        return None
    wide = s.astype(np.float64)
    with np.errstate(over="ignore"):
        up = (wide + np.nextafter(s, np.float32(np.inf)).astype(np.float64)) / 2
        down = (wide + np.nextafter(s, np.float32(-np.inf)).astype(np.float64)) / 2
        above = np.where(up.astype(np.float32) > s, up, np.nextafter(up, np.inf))
        reached = np.where(down.astype(np.float32) >= s, down, np.nextafter(down, np.inf))
    if not (np.isfinite(above).all() and np.isfinite(reached).all()):
        return None
    return above.tolist(), reached.tolist()
