"""Where an export run's jobs run: worker processes here (``workers``), or Ray tasks
(``--executor ray``), and the pool its captures run on."""

from __future__ import annotations

import contextlib
import os

from ..backends import default_registry
from ..core.spec import ExportConfig
from ..core.system import cores_busy
from .workers import WorkerPool, default_size, fork_server_ready


CAPTURE_START_ENV = "PTEFORGE_CAPTURE_START"


def open_pool(config: ExportConfig, jobs: int, on_stage):
    """Where the jobs run: worker processes here, or Ray tasks (--executor ray)."""
    if config.executor == "ray":
        from .ray_pool import RayPool  # ray: an optional extra

        return RayPool(config.ray_address, size=config.jobs, quiet=not config.debug, on_stage=on_stage,
                       resources=ray_resources, jobs=jobs)
    return WorkerPool(config.jobs or default_size(jobs), quiet=not config.debug, on_stage=on_stage)


def open_capture_pool(config: ExportConfig, pool, captures: int, on_stage):
    """Where the captures run: on the local executor, worker processes of their own, started
    fresh (spawn), which import torch and not ExecuTorch: the first capture then runs beside
    the fork server's imports (~4 s) instead of after them (the first target job started
    ~1 s sooner on mobilenet_v3_small). That helps only where a core would otherwise be
    idle: when every core is busy already (other work, other runs), a second interpreter
    importing torch only competes with the fork server, and the captures fork from it
    (four tiny exports side by side on 2 cores: 31 s against 36 s). They fork from it too
    when an earlier run in this process left it ready: a fresh interpreter's imports took
    ~6 s of a tiny model's 7 s capture. ``PTEFORGE_CAPTURE_START`` (fresh or fork) decides
    instead. On Ray, the pool's tasks."""
    if config.executor != "local":
        return contextlib.nullcontext(pool)
    start = os.environ.get(CAPTURE_START_ENV, "")
    fresh = start == "fresh" or (start != "fork" and not fork_server_ready() and not cores_busy())
    return WorkerPool(config.jobs or default_size(captures), quiet=not config.debug, on_stage=on_stage, fresh=fresh)


def ray_resources(job) -> dict:
    """A target job asks for the Ray resource of its backends' SDK nodes (``ray_resource``),
    when the cluster has such nodes; captures run anywhere."""
    import ray  # an optional extra

    target = getattr(job, "target", None)  # a TargetJob's; captures run anywhere
    have = ray.cluster_resources() if target is not None else {}
    wanted = {default_registry().get(b).ray_resource for b in getattr(target, "backends", ())}
    return {r: 0.001 for r in wanted if r and have.get(r)}
