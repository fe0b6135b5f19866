"""Image classification: torchvision's MobileNets (category ``mobilenet``), ImageNet labels."""

from __future__ import annotations

from ..core.spec import Preprocessing
from .vision import installed
from .base import Family


def top_k(logits, k: int = 5, names: list[str] | None = None) -> list[dict]:
    import torch

    probs = torch.softmax(logits.flatten().float(), 0)
    values, indices = torch.topk(probs, min(k, probs.numel()))
    return [
        {"class": int(i), "name": names[int(i)] if names and int(i) < len(names) else str(int(i)), "prob": round(float(v), 5)}
        for v, i in zip(values, indices)
    ]


class Classification(Family):
    word = "mobilenet"
    category = "mobilenet"
    task = "classification"
    models = ("mobilenet_v3_small", "mobilenet_v2", "mobilenet_v3_large")
    model_help = "MobileNet models (alone: mobilenet_v3_small)"
    factory = "pteforge.models.torchvision_models:build"
    input_shape = (1, 3, 224, 224)
    preprocessing = Preprocessing(size=224, resize=256, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    labels_file = "imagenet_classes.txt"
    labels_from = "torchvision"
    outputs = "(1, 1000) ImageNet logits"
    min_agreement = 1.0  # the same top-1 on every photo
    order = 10
    resizable = 32  # global pooling before the classifier: any multiple of the network's stride

    def label_names(self) -> list[str]:
        """The weights' ``categories``: torchvision's ImageNet list, read from its source
        file without importing torchvision (a test checks they are the same)."""
        import ast

        path = installed("torchvision", "models", "_meta.py")
        try:
            for node in ast.parse(path.read_text()).body if path else ():
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["_IMAGENET_CATEGORIES"]:
                    return list(ast.literal_eval(node.value))
        except (OSError, ValueError, SyntaxError):
            pass
        from torchvision.models import MobileNet_V3_Small_Weights

        return list(MobileNet_V3_Small_Weights.DEFAULT.meta["categories"])

    def decode(self, outputs, meta, names):
        return top_k(outputs[0], 5, names)

    def output_classes(self, outputs):
        return outputs[0].shape[-1]

    def agreement(self, reference, outputs, meta):
        """1.0 when the program's top-1 class is eager's."""
        return float(int(reference[0].flatten().argmax()) == int(outputs[0].flatten().argmax()))
