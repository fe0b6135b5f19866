"""The pipeline's stages, one function each, on plain data.

capture → quantize? → lower → write → verify. ``pipeline.export_target`` chains
them for one (model, target) and is the unit a worker process runs.
"""
