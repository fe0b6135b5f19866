"""The host's ExecuTorch runtime: which delegates it registers.

``import executorch.runtime`` costs about 10 s, so callers ask here, lazily, once.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def registered_backends() -> frozenset[str]:
    """Names of the delegates this host's ExecuTorch runtime can execute.

    The registry is compiled into the wheel's pybindings library, so the answer is
    kept in the user cache under the library's identity (version, size, mtime): after
    the first time, asking costs no ``import executorch.runtime`` (~10 s, and it pulls
    in the whole compiler)."""
    import json

    from .cache import cache_root
    from .io import write_atomic

    path = _registry_cache_path(cache_root())
    if path is not None:
        try:
            return frozenset(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    from executorch.runtime import Runtime

    names = frozenset(Runtime.get().backend_registry.registered_backend_names)
    if path is not None:
        try:
            write_atomic(path, json.dumps(sorted(names)))
        except OSError:
            pass
    return names


def _registry_cache_path(root):
    import hashlib
    from importlib import metadata

    try:
        dist = metadata.distribution("executorch")
    except metadata.PackageNotFoundError:
        return None
    # the pybindings' native libraries, where the delegates register themselves
    libs = [f for f in dist.files or [] if str(f).startswith("executorch/extension/pybindings/") and f.name.endswith(".so")]
    if not libs:
        return None
    ident = dist.version
    for f in sorted(libs, key=str):
        try:
            st = dist.locate_file(f).stat()
        except OSError:
            return None
        ident += f":{f}:{st.st_size}:{st.st_mtime_ns}"
    return root / "runtime" / f"registered-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"
