"""What a program is compared with: the model itself, or ONNX Runtime running the
original ONNX file."""

from __future__ import annotations

from ...core.spec import InputSpec, ModelSpec


class OnnxReference:
    """The eager reference of an ONNX model: ONNX Runtime running the original file, called
    like a module."""

    def __init__(self, path: str, held: tuple[InputSpec, ...] = ()):
        import numpy as np  # 0.6 s with onnxruntime: every capture imports reference_model
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        # The file's operators as written: past the basic level, ONNX Runtime fuses a QDQ file's
        # operators into integer kernels whose rounding depends on the CPU's instructions (a
        # QDQ net's output 3 steps apart on an AMD EPYC without AVX-512), so a reference, and
        # a verdict, would differ between the export's machine and validate's.
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.held = {i.name: np.array(i.value, dtype=np.dtype(i.dtype)) for i in held}
        self.names = [i.name for i in self.session.get_inputs() if i.name not in self.held]

    def __call__(self, *inputs):
        import torch

        feeds = {**self.held, **{n: x.detach().cpu().numpy() for n, x in zip(self.names, inputs)}}
        outputs = self.session.run(None, feeds)
        return [torch.from_numpy(o) for o in outputs]


def reference_model(spec: ModelSpec, model):
    """What the program is compared with: the model itself, or ONNX Runtime on an ONNX file."""
    if spec.source != "onnx":
        return model
    assert spec.path is not None  # an ONNX file's spec names it
    return OnnxReference(spec.path, tuple(i for i in spec.inputs if i.value is not None))
