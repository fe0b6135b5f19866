"""ExecuTorch's reference implementations of CMSIS-NN's convolutions, with each output
channel's requantization done for all channels at once.

ExecuTorch 1.5.1's ``cortex_m::quantized_conv2d`` and ``quantized_depthwise_conv2d``
(``backends/cortex_m/ops/operators.py``) requantize their int32 accumulators one output
channel at a time, a dozen small PyTorch calls each: a run of mobilenet_v3_small's Cortex-M
program made 9,000 of them, half of its simulation. And they convolve int32 tensors, for
which PyTorch has no dilated convolution at all and a plain one 2.6x slower than in
float64. These accumulate in float64, exactly (``_convolved``), and requantize every
channel at once: the same integers (the tests compare them with the reference, value for
value, and run the dilated ones the reference cannot). The simulation runs them in its
place (``simulate.FASTER``)."""

from __future__ import annotations

from typing import Callable


def requantized(acc, multipliers, shifts):
    """CMSIS-NN's ``arm_nn_requantize`` of each channel ``c`` (dim 1) of ``acc`` by
    ``multipliers[c]`` and ``shifts[c]``, as ExecuTorch's ``requantize_cmsis`` does it for one."""
    import torch

    shape = (1, -1) + (1,) * (acc.dim() - 2)
    shifts = shifts.to(torch.int64).reshape(shape)
    value = acc.to(torch.int64) << shifts.clamp(min=0)
    result = (value * multipliers.to(torch.int64).reshape(shape) + (1 << 30)) >> 31
    right = (-shifts).clamp(min=0)
    mask = (1 << right) - 1
    remainder = result & mask
    result = result >> right
    threshold = (mask >> 1) + (result < 0).to(torch.int64)
    return (result + (remainder > threshold).to(torch.int64)).to(torch.int32)


def quantized_conv2d(input, weight, bias, stride, padding, dilation, input_offset: int, output_offset: int,
                     requantize_multipliers, requantize_shifts, activation_min: int, activation_max: int, scratch):
    if input.dim() != 4 or weight.dim() != 4:
        raise RuntimeError("quantized_conv2d expects 4D input and weight tensors")
    acc = _convolved(input, input_offset, weight.permute(0, 3, 1, 2), bias, stride, padding, dilation,
                     input.shape[1] // weight.shape[3])
    return _out(acc, requantize_multipliers, requantize_shifts, output_offset, activation_min, activation_max)


def quantized_depthwise_conv2d(input, weight, bias, stride, padding, dilation, depth_multiplier: int,
                               input_offset: int, output_offset: int, requantize_multipliers, requantize_shifts,
                               activation_min: int, activation_max: int, scratch):
    if input.dim() != 4 or weight.dim() != 4:
        raise RuntimeError("quantized_depthwise_conv2d expects 4D input and weight tensors")
    acc = _convolved(input, input_offset, weight.permute(3, 0, 1, 2), bias, stride, padding, dilation, input.shape[1])
    return _out(acc, requantize_multipliers, requantize_shifts, output_offset, activation_min, activation_max)


def _convolved(input, input_offset: int, weight, bias, stride, padding, dilation, groups: int):
    """The int32 accumulators of an int8 convolution (``weight`` OIHW), computed in float64:
    each term and partial sum is an integer below 2**53 in magnitude (int8 inputs and
    weights), which float64 holds exactly, so the sums are the integers themselves; then
    int32, as the reference's accumulators (and CMSIS-NN's) are."""
    import torch

    terms = weight.shape[1] * weight.shape[2] * weight.shape[3]
    assert 256 * 128 * terms + (0 if bias is None else int(bias.abs().max())) < 2**52, "beyond float64's integers"
    acc = torch.nn.functional.conv2d(
        input.to(torch.float64) + int(input_offset), weight.to(torch.float64),
        None if bias is None else bias.to(torch.float64),
        stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), groups=groups)
    return acc.to(torch.int64).to(torch.int32)


def _out(acc, multipliers, shifts, output_offset: int, activation_min: int, activation_max: int):
    import torch

    result = requantized(acc, multipliers, shifts) + output_offset
    return torch.clamp(result, activation_min, activation_max).to(torch.int8, memory_format=torch.channels_last)


# cortex_m:: operator -> its implementation here
FASTER: dict[str, Callable] = {
    "cortex_m::quantized_conv2d": quantized_conv2d,
    "cortex_m::quantized_depthwise_conv2d": quantized_depthwise_conv2d,
}
