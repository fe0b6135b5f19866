"""Two models of one's own for examples/zoo.toml: a small classifier and a small detector in
Ultralytics' output layout ([1, 4 + classes, anchors]: a box in input pixels, then scores)."""

import torch


class PetClassifier(torch.nn.Module):
    def __init__(self, classes: int = 3):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


class PartDetector(torch.nn.Module):
    def __init__(self, classes: int = 2, stride: int = 8):
        super().__init__()
        self.stride = stride
        self.conv = torch.nn.Conv2d(3, 4 + classes, stride, stride=stride)

    def forward(self, x):
        y = self.conv(x).flatten(2)
        side, s = x.shape[-1] // self.stride, self.stride
        idx = torch.arange(side * side, dtype=x.dtype)
        cx, cy = (idx % side + 0.5) * s, (idx // side + 0.5) * s
        box = torch.stack([cx + y[:, 0], cy + y[:, 1], s + s * y[:, 2].sigmoid(), s + s * y[:, 3].sigmoid()], 1)
        return torch.cat([box, y[:, 4:].sigmoid()], 1)


def pets():
    torch.manual_seed(0)
    return PetClassifier().eval()


def parts():
    torch.manual_seed(0)
    return PartDetector().eval()
