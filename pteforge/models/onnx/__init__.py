"""ONNX files: their inputs (``spec``), their import into PyTorch with onnx2torch
(``build``), what onnx2torch is given first (``graph``: shapes fixed, constants folded;
``constants``: arguments given as constants taken as numbers), the converters pteforge
adds (``converters``), and ONNX Runtime as the eager reference (``reference``)."""
