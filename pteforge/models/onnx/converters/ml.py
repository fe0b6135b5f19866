"""The classic machine-learning operators (domain ``ai.onnx.ml``) that scikit-learn's
converter (skl2onnx) and onnxmltools write around a network or a linear model:
``ArrayFeatureExtractor`` (an MLP's class label), ``Scaler`` and ``Normalizer`` (a
pipeline's preprocessing), ``Binarizer``, ``LinearRegressor`` and ``LinearClassifier``.
Each computes what ONNX Runtime 1.31 computes, against which the export then checks it on
the file itself (ONNX's reference, ``onnx.reference.ops.aionnxml``, differs on a binary
classifier's scores and the normalizers' zero rows). What has no tensor form is named
in ``UNCONVERTIBLE`` with what to do instead (ZipMap's list of dictionaries and text labels
are refused with the file's outputs: ``spec.py``)."""

from __future__ import annotations

import torch

from .common import _result, _text

ML = "ai.onnx.ml"

# operators with no PyTorch form a program can hold: why, and what to do instead
_TREES = ("a tree ensemble walks tables, which is no tensor operator a backend lowers",
          "pteforge exports networks and linear models: train a small network (MLPClassifier, MLPRegressor) or "
          "a linear model for the app")
UNCONVERTIBLE = {
    "TreeEnsembleClassifier": _TREES,
    "TreeEnsembleRegressor": _TREES,
    "TreeEnsemble": _TREES,
}


def _floats(node, name: str, default=None) -> torch.Tensor:
    values = node.attributes.get(name, default)
    if values is None:
        raise NotImplementedError(f"{node.operation_type} without {name}")
    return torch.tensor(values if isinstance(values, (list, tuple)) else [values], dtype=torch.float32)


def _class_labels(node) -> torch.Tensor | None:
    if node.attributes.get("classlabels_strings"):
        raise NotImplementedError(f"{node.operation_type} with text class labels (classlabels_strings): a program "
                                  "returns numbers; convert the model trained on integer classes")
    labels = node.attributes.get("classlabels_ints")
    return torch.tensor(labels, dtype=torch.int64) if labels else None


class ArrayFeatureExtractor(torch.nn.Module):
    """``data[..., indices]``, the indices flattened; a 1-D ``data`` gives one row."""

    def forward(self, data, indices):
        picked = torch.index_select(data, -1, indices.reshape(-1).to(torch.int64))
        return picked.reshape(1, -1) if data.dim() == 1 else picked


class Scaler(torch.nn.Module):
    def __init__(self, offset: torch.Tensor, scale: torch.Tensor):
        super().__init__()
        self.register_buffer("offset", offset)
        self.register_buffer("scale", scale)

    def forward(self, x):
        return (x.to(torch.float32) - self.offset) * self.scale


class Normalizer(torch.nn.Module):
    """Each row over its largest value (MAX: the largest, not the largest magnitude), its L1
    or its L2 norm; a row where that is 0 stays as it is (ONNX Runtime's)."""

    def __init__(self, norm: str):
        super().__init__()
        if norm not in ("MAX", "L1", "L2"):
            raise NotImplementedError(f"Normalizer with norm {norm!r}")
        self.norm = norm

    def forward(self, x):
        x = x.to(torch.float32)
        if self.norm == "L2":
            total = x.square().sum(dim=-1, keepdim=True)
            scaled = torch.where(x < 0, -1.0, 1.0) * torch.sqrt(x.square() / torch.where(total == 0, 1.0, total))
            return torch.where(total == 0, x, scaled)
        size = x.amax(dim=-1, keepdim=True) if self.norm == "MAX" else x.abs().sum(dim=-1, keepdim=True)
        return torch.where(size == 0, x, x / torch.where(size == 0, 1.0, size))


class Binarizer(torch.nn.Module):
    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        return (x > self.threshold).to(x.dtype)


def _probit(p):
    """ONNX Runtime's probit: √2·erfinv(2p − 1), erfinv by its closed-form approximation."""
    x = 2 * p - 1
    sign = torch.where(x < 0, -1.0, 1.0)
    log = torch.log((1 - x) * (1 + x))
    a = 2 / (3.14159 * 0.147) + 0.5 * log
    return 1.41421356 * sign * torch.sqrt(-a + torch.sqrt(a * a - log / 0.147))


def _softmax_zero(scores):
    """ONNX Runtime's SOFTMAX_ZERO: a softmax over the scores that are not 0; a 0 stays ~0."""
    top = scores.amax(dim=1, keepdim=True)
    kept = scores.abs() > 1e-7
    e = torch.where(kept, torch.exp(scores - top), scores * torch.exp(-top))
    return e / torch.where(kept, e, 0.0).sum(dim=1, keepdim=True)


POST_TRANSFORMS = {
    "NONE": lambda s: s,
    "LOGISTIC": torch.sigmoid,
    "SOFTMAX": lambda s: torch.softmax(s, dim=1),
    "SOFTMAX_ZERO": _softmax_zero,
    "PROBIT": _probit,
}


def _post_transform(node) -> str:
    post = _text(node.attributes.get("post_transform", "NONE"))
    if post not in POST_TRANSFORMS:
        raise NotImplementedError(f"{node.operation_type} with post_transform {post!r}")
    return post


class _Linear(torch.nn.Module):
    """Scores ``x @ W.T + b``, then ONNX Runtime's post transform: every one over several
    scores a row, only PROBIT over one."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, post: str):
        super().__init__()
        self.register_buffer("weight", weight)
        self.register_buffer("bias", bias)
        self.post = post

    def raw(self, x):
        y = x.to(torch.float32) @ self.weight.T
        return y + self.bias if self.bias is not None else y

    def transformed(self, scores):
        return POST_TRANSFORMS[self.post](scores) if scores.shape[1] > 1 or self.post == "PROBIT" else scores


class LinearRegressor(_Linear):
    def forward(self, x):
        return self.transformed(self.raw(x))


class LinearClassifier(_Linear):
    """ONNX Runtime's: the label is the class of the highest raw score (of a lone score, the
    second of two classes where it is above 0, else the first; 1 or 0 without two); a
    lone score with two classes gives the scores ``[1 - s, s]`` (LOGISTIC: their sigmoids
    ``[σ(-s), σ(s)]``), ONNX Runtime 1.31's."""

    def __init__(self, weight, bias, labels: torch.Tensor | None, post: str):
        super().__init__(weight, bias, post)
        lone = weight.shape[0] == 1
        if not lone and labels is None:
            raise NotImplementedError(f"LinearClassifier of {weight.shape[0]} classes without class labels "
                                      "(ONNX Runtime refuses it too)")
        self.two = lone and labels is not None and labels.numel() == 2
        if self.two and post == "PROBIT":
            raise NotImplementedError("LinearClassifier of one score for two classes with post_transform PROBIT "
                                      "(ONNX Runtime leaves half of its scores unwritten)")
        self.register_buffer("labels", labels if not lone or self.two else torch.tensor([0, 1]))

    def forward(self, x):
        raw = self.raw(x)
        if raw.shape[1] > 1:
            return self.labels[raw.argmax(dim=1)], self.transformed(raw)
        label = self.labels[(raw[:, 0] > 0).to(torch.int64)]
        if not self.two:
            return label, self.transformed(raw)
        return label, torch.sigmoid(torch.cat([-raw, raw], dim=1)) if self.post == "LOGISTIC" else \
            torch.cat([1 - raw, raw], dim=1)


def _linear(node, rows: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    weight = _floats(node, "coefficients")
    weight = weight.reshape(rows, -1)
    bias = node.attributes.get("intercepts")
    return weight, (torch.tensor(bias, dtype=torch.float32) if bias else None)


def _linear_classifier(node, graph):  # noqa: ARG001 - onnx2torch's converter signature
    labels = _class_labels(node)
    intercepts = node.attributes.get("intercepts")
    rows = len(intercepts) if intercepts else (labels.numel() if labels is not None and labels.numel() > 2 else 1)
    return _result(LinearClassifier(*_linear(node, rows), labels, _post_transform(node)), node)


def _linear_regressor(node, graph):  # noqa: ARG001
    return _result(LinearRegressor(*_linear(node, int(node.attributes.get("targets", 1))), _post_transform(node)), node)


def _register_ml() -> None:
    """Version 1 of each: the only one ONNX defines for these."""
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter

    converters = {
        "ArrayFeatureExtractor": lambda node, graph: _result(ArrayFeatureExtractor(), node),
        "Scaler": lambda node, graph: _result(Scaler(_floats(node, "offset", [0.0]), _floats(node, "scale", [1.0])),
                                              node),
        "Normalizer": lambda node, graph: _result(Normalizer(_text(node.attributes.get("norm", "MAX"))), node),
        "Binarizer": lambda node, graph: _result(Binarizer(float(node.attributes.get("threshold", 0.0))), node),
        "LinearClassifier": _linear_classifier,
        "LinearRegressor": _linear_regressor,
    }
    for op, convert in converters.items():
        if OperationDescription(domain=ML, operation_type=op, version=1) not in _CONVERTER_REGISTRY:
            add_converter(operation_type=op, version=1, domain=ML)(convert)
