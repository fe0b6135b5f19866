"""The host's ExecuTorch runtime: which delegates it registers.

``import executorch.runtime`` costs about 10 s, so callers ask here, lazily, once.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def registered_backends() -> frozenset[str]:
    """Names of the delegates this process's ExecuTorch runtime can execute."""
    from executorch.runtime import Runtime

    return frozenset(Runtime.get().backend_registry.registered_backend_names)
