"""Every backend pteforge knows, one file each. ``default_registry()`` builds the registry.

Importing this package imports no SDK: backend files import their SDKs inside methods.
"""

from __future__ import annotations

from functools import lru_cache

from ..registry import Registry
from .base import Availability, Backend, Check
from .cadence import Cadence
from .coreml import CoreML
from .cortex_m import CortexM
from .ethos_u55 import EthosU55
from .ethos_u85 import EthosU85
from .mediatek import MediaTek
from .metal import Metal
from .mps import MPS
from .nxp import NXP
from .openvino import OpenVINO
from .portable import Portable
from .qnn import QNN
from .samsung import Samsung
from .tosa import Tosa
from .vgf import Vgf
from .vulkan import Vulkan
from .webgpu import WebGPU
from .xnnpack import Xnnpack

# Order: the seed's table order first (what users know), then the rest.
ALL_BACKENDS: tuple[type[Backend], ...] = (
    Xnnpack, CoreML, MPS, Metal, Vulkan, QNN, MediaTek, EthosU55, EthosU85, Cadence,
    OpenVINO, NXP, Samsung, Vgf, Tosa, CortexM, WebGPU, Portable,
)


def build_registry(classes=ALL_BACKENDS) -> Registry[Backend]:
    registry: Registry[Backend] = Registry("backend")
    for cls in classes:
        registry.register(cls.name, cls(), aliases=cls.aliases)
    return registry


@lru_cache(maxsize=1)
def default_registry() -> Registry[Backend]:
    return build_registry()


def availability(backend: Backend, registered: frozenset[str]) -> Availability:
    try:
        lower = backend.lower_check()
    except Exception as exc:  # a broken SDK install must not break the table
        from ..errors import one_line

        lower = Check(False, f"availability check failed: {one_line(exc)}")
    return Availability(backend.name, lower, backend.run_check(registered))


__all__ = ["Availability", "Backend", "Check", "build_registry", "default_registry", "availability"]
