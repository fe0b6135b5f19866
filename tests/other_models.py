"""A second module with a factory named like one in tiny_models: names that collide."""

import torch


def tiny():
    """For a 1x3x16x16 input."""
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 14 * 14, 2)
    )
