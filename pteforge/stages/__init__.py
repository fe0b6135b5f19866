"""The stages of one (model, target) job, one module each, on plain data, and the pipeline
that runs them.

capture → quantize? → lower → write → verify. ``pipeline.export_target`` chains
them for one (model, target) and is the unit a worker process runs.
"""
