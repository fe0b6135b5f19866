"""One answer to "can this program run on this host, and if not, why".

The host is this machine's ExecuTorch runtime as pteforge runs programs with it: the
wheel's pybindings plus the kernel libraries the wheel ships (the quantized and the LLM kernels
register themselves on import). A program runs here when every delegate it calls is
registered and every operator it calls has a kernel — exactly what the runtime checks
when it loads the program. export, validate, bench, select and ``load_best`` all ask
:func:`pteforge.backends.program_check` of it, so one artifact gets one verdict everywhere.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import json
import logging
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path

# kernel libraries beside the portable ones: quantized_decomposed:: (quantized programs) and
# llama:: (a language model's in-place KV cache and fused attention, pteforge.text.kvcache)
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


def load_program(program):
    """A .pte (its path or its bytes) loaded by this host's runtime, checked for internal
    consistency."""
    from executorch.runtime import Verification

    return load_runtime().load_program(program, verification=Verification.InternalConsistency)


def load_forward(program):
    """(the program, its ``forward`` method) of a .pte (its path or its bytes), loaded; keep
    the program while the method runs (it holds what the method reads). Where this fails
    is said on the exception (``exc.stage = "load"``), so that its row is LOAD_FAILED, not
    RUN_FAILED, whatever the runtime's words."""
    try:
        loaded = load_program(program)
        return loaded, loaded.load_method("forward")
    except Exception as exc:
        setattr(exc, "stage", "load")  # any exception type: child.py reads it with hasattr
        raise


def execute_in_place(method, inputs: list):
    """``method.execute(inputs)`` without ExecuTorch's copy of each output: the tensors are
    the program's own memory, valid until its next call, so read or copy them first. A
    decoding loop reads its logits once (Gemma's are 1 MB a token, ~0.13 ms to copy); an
    ExecuTorch whose method takes no ``clone_outputs`` copies, as before."""
    call = getattr(method, "_method", None)
    if call is not None and "clone_outputs" in (type(call).__call__.__doc__ or ""):
        return call(inputs, clone_outputs=False)
    return method.execute(inputs)


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
            from ..core.errors import UsageError

            raise UsageError(f"no runtime record for host {os_name!r}", fix=f"use one of: {', '.join(hosts)}")
        return cls(frozenset(hosts[os_name]["backends"]), frozenset(operators), f"the {os_name} wheel's runtime")

    def to_dict(self) -> dict:
        return {"backends": sorted(self.backends), "operators": sorted(self.operators)}

    @classmethod
    def from_dict(cls, d: dict) -> "Host":
        return cls(frozenset(d["backends"]), frozenset(d.get("operators", ())))


@lru_cache(maxsize=1)
def recorded_runtimes() -> dict:
    return json.loads((Path(__file__).parents[1] / "data" / "runtimes.json").read_text())


@lru_cache(maxsize=1)
def host() -> Host:
    """This host, from a cache keyed by the pybindings' identity (asking the runtime costs
    ``import executorch.runtime``, ~4 s, and pulls in the whole compiler)."""
    found = known_host()
    if found is None:
        found = _asked_quietly()
        remember_host(found)
    return found


_answered: list[Host] = []  # this process's answer, where the cache directory could not keep it


def known_host() -> Host | None:
    """This host as the cache holds it (an earlier run asked its runtime), or as this process
    was told where the cache could not keep it; None when never asked."""
    from ..core.io import cache_root

    path = _cache_path(cache_root())
    if path is not None:
        try:
            return Host.from_dict(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return _answered[-1] if _answered else None


def remember_host(found: Host) -> None:
    """Keep ``found`` (this host's runtime's answer) for later runs, or for this process
    where the cache directory cannot be written."""
    from ..core.io import cache_root, keep

    path = _cache_path(cache_root())
    if path is None or not keep(path, json.dumps(found.to_dict())):
        _answered[:] = [found]


def _asked_quietly() -> Host:
    """``Host.here()`` with torch's loggers held to errors unless the run is verbose: the
    import it needs pulls in torchao, whose enum registration logs a deprecation warning
    on the terminal of the command that asked (the workers' own are silenced)."""
    import torch  # noqa: F401 - its import sets its loggers' levels: first, then hold them

    torch_log = logging.getLogger("torch")
    before = torch_log.level
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:
        torch_log.setLevel(logging.ERROR)
    try:
        return Host.here()
    finally:
        torch_log.setLevel(before)


def _cache_path(root):
    ident = _runtime_identity()
    return None if ident is None else root / "runtime" / f"host-{ident}.json"


_PYBINDINGS = "executorch/extension/pybindings/"


@lru_cache(maxsize=1)
def _runtime_identity() -> str | None:
    """The installed runtime's identity: ExecuTorch's version, the kernel libraries asked
    for, and the size and time of each of the pybindings' native libraries (where the
    delegates register themselves). Read from the lines of the wheel's RECORD that name
    them: ``Distribution.files`` makes a path of each of its ~9,200 lines (67 ms, asked
    before the command's first job)."""
    try:
        dist = metadata.distribution("executorch")
    except metadata.PackageNotFoundError:
        return None
    lines = [line for line in (dist.read_text("RECORD") or "").splitlines() if line.startswith(_PYBINDINGS)]
    libs = sorted(row[0] for row in csv.reader(lines) if row and row[0].endswith((".so", ".pyd")))
    if not libs:
        return None
    ident = f"{dist.version}:{','.join(KERNEL_LIBRARIES)}"
    for name in libs:
        try:
            st = Path(str(dist.locate_file(name))).stat()
        except OSError:
            return None
        ident += f":{name}:{st.st_size}:{st.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]
