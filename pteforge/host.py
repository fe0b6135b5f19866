"""One answer to "can this program run on this host, and if not, why".

The host is this machine's ExecuTorch runtime as pteforge runs programs with it: the
wheel's pybindings plus the kernel libraries the wheel ships (the quantized and the LLM kernels
register themselves on import). A program runs here when every delegate it calls is
registered and every operator it calls has a kernel — exactly what the runtime checks
when it loads the program. export, validate, bench, select and ``load_best`` all ask
:meth:`Host.program_check`, so one artifact gets one verdict everywhere.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache

from .backends.base import Check


# kernel libraries beside the portable ones: quantized_decomposed:: (quantized programs) and
# llama:: (a language model's in-place KV cache and fused attention, pteforge.kvcache)
KERNEL_LIBRARIES = ("executorch.kernels.quantized", "executorch.extension.llm.custom_ops.custom_ops")


def load_runtime():
    """``executorch.runtime.Runtime`` with the kernel libraries the wheel ships loaded."""
    from executorch.runtime import Runtime

    for library in KERNEL_LIBRARIES:
        try:
            importlib.import_module(library)
        except ImportError:
            pass
    return Runtime.get()


@dataclass(frozen=True)
class Host:
    backends: frozenset[str]  # delegate ids registered in this runtime
    operators: frozenset[str]  # kernels registered, e.g. "aten::add.out"
    where: str = field(default="this runtime", compare=False)  # how its answers name it

    @classmethod
    def here(cls) -> "Host":
        runtime = load_runtime()
        return cls(frozenset(runtime.backend_registry.registered_backend_names),
                   frozenset(runtime.operator_registry.operator_names))

    @classmethod
    def recorded(cls, os_name: str, operators: frozenset[str] = frozenset()) -> "Host":
        """Another host OS's runtime as its ExecuTorch wheel registers delegates
        (``pteforge/data/runtimes.json``), with ``operators`` for its kernels (the pip wheels
        build the same portable, optimized and quantized kernel libraries)."""
        hosts = recorded_runtimes()["hosts"]
        if os_name not in hosts:
            from .errors import UsageError

            raise UsageError(f"no runtime record for host {os_name!r}", fix=f"use one of: {', '.join(hosts)}")
        return cls(frozenset(hosts[os_name]["backends"]), frozenset(operators), f"the {os_name} wheel's runtime")

    def to_dict(self) -> dict:
        return {"backends": sorted(self.backends), "operators": sorted(self.operators)}

    @classmethod
    def from_dict(cls, d: dict) -> "Host":
        return cls(frozenset(d["backends"]), frozenset(d.get("operators", ())))

    def program_check(self, delegates, operators) -> Check:
        """Can a program calling ``delegates`` and ``operators`` run here?"""
        from .backends import default_registry

        registry = default_registry()
        for delegate in dict.fromkeys(delegates):
            if delegate not in self.backends:
                owner = next((b for b in registry if b.runtime_name == delegate), None)
                where = ", ".join(owner.platforms) if owner else "a device whose runtime has it"
                return Check(False, f"{delegate} is not registered in {self.where}", f"run it on a device: {where}")
        missing = [op for op in dict.fromkeys(operators) if op not in self.operators]
        # a backend's own kernels (cortex_m::, cadence::) are the cause a user knows: name them first
        owned = {b.ops_namespace for b in registry if b.ops_namespace}
        missing.sort(key=lambda op: op.split("::")[0] not in owned)
        if missing:
            namespace = missing[0].split("::")[0]
            owner = next((b for b in registry if b.ops_namespace == namespace), None)
            where = f"{owner.title}: {', '.join(owner.platforms)}" if owner else "a runtime built with these kernels"
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            return Check(False, f"the {namespace}:: kernels are not in {self.where} ({missing[0]}{more})",
                         f"run it on a device whose ExecuTorch links them ({where})")
        return Check(True, f"every delegate and kernel it calls is in {self.where}")


@lru_cache(maxsize=1)
def recorded_runtimes() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).parent / "data" / "runtimes.json").read_text())


@lru_cache(maxsize=1)
def host() -> Host:
    """This host, from a cache keyed by the pybindings' identity (asking the runtime costs
    ``import executorch.runtime``, ~10 s, and pulls in the whole compiler)."""
    import json

    from .cache import cache_root
    from .io import keep
    path = _cache_path(cache_root())
    if path is not None:
        try:
            return Host.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    found = Host.here()
    if path is not None:
        keep(path, json.dumps(found.to_dict()))
    return found


def _cache_path(root):
    import hashlib
    from importlib import metadata

    try:
        dist = metadata.distribution("executorch")
    except metadata.PackageNotFoundError:
        return None
    # the pybindings' native libraries, where the delegates register themselves
    libs = [f for f in dist.files or [] if str(f).startswith("executorch/extension/pybindings/") and f.name.endswith((".so", ".pyd"))]
    if not libs:
        return None
    ident = f"{dist.version}:{','.join(KERNEL_LIBRARIES)}"
    for f in sorted(libs, key=str):
        try:
            st = dist.locate_file(f).stat()
        except OSError:
            return None
        ident += f":{f}:{st.st_size}:{st.st_mtime_ns}"
    return root / "runtime" / f"host-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.json"
