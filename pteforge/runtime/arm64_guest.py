"""The Arm64 side of the proof under emulation: run under the emulated aarch64 CPython that
``pteforge setup arm64`` builds (``runtime/arm64.py`` starts it), it imports torch and
ExecuTorch's pybindings once (``import torch`` is most of the ~9 s start-up) and then runs
every program of a job file, so one emulated process serves a whole run.

It imports nothing of pteforge's (the guest has torch, numpy and executorch only) and runs
with the host's Python too, which is how the tests check it without emulation::

    python3.11 arm64_guest.py JOBS.json     # JOBS.json: {"programs": [{"pte", "inputs", "outputs"}]}
    python3.11 arm64_guest.py --check       # one line: machine, features, ExecuTorch's version

``inputs``: an .npz of arrays ``i<n>_<k>`` (input list n, tensor k); ``outputs``: the .npz
it writes, ``o<n>_<k>``. Stdout: a first JSON line (machine, CPU features, ExecuTorch's
version, start-up seconds), then one per program (``ok``, ``error``, load and run seconds).
"""

import importlib.abc
import json
import platform
import struct
import sys
import time
from typing import Any

# Linux's aarch64 hwcaps (asm/hwcap.h) as /proc/self/auxv gives them: what the CPU offers
_HWCAP = {9: "fphp", 10: "asimdhp", 20: "asimddp", 22: "sve", 23: "asimdfhm"}
_HWCAP2 = {1: "sve2", 13: "i8mm", 14: "bf16", 23: "sme"}
_AT_HWCAP, _AT_HWCAP2 = 16, 26


class _CpuOnlyTorch(importlib.abc.MetaPathFinder):
    """PyPI's aarch64 torch is a CUDA build whose CUDA libraries are stand-ins here
    (``arm64_setup``'s stubs): on the first import after torch._C loads, make it look like
    a CPU build (no CUDA, no c10d/rpc, whose registrations construct NCCL objects)."""

    done = False

    def find_spec(self, name, path, target=None):
        C: Any = sys.modules.get("torch._C")  # a native module: its attributes are not typed
        if C is not None and not self.done:
            self.done = True
            for attr in ("_c10d_init", "_rpc_init", "_dist_autograd_init"):
                if hasattr(C, attr):
                    delattr(C, attr)
            C._has_cuda = False
            C._has_cudnn = False
            C._cuda_getDeviceCount = lambda: 0
        return None


class LoadFailed(RuntimeError):
    """The runtime refused the program (its row: LOAD_FAILED)."""


def features() -> list:
    """The CPU features the kernel (or qemu) reports, read from the auxiliary vector."""
    try:
        with open("/proc/self/auxv", "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    caps = {}
    for i in range(0, len(data) - 15, 16):
        key, value = struct.unpack_from("<QQ", data, i)
        caps[key] = value
    hw, hw2 = caps.get(_AT_HWCAP, 0), caps.get(_AT_HWCAP2, 0)
    return [n for b, n in _HWCAP.items() if hw >> b & 1] + [n for b, n in _HWCAP2.items() if hw2 >> b & 1]


def start() -> dict:
    """Import torch and the pybindings; what this process is."""
    t0 = time.perf_counter()
    if platform.machine() == "aarch64":
        sys.meta_path.insert(0, _CpuOnlyTorch())
    import torch  # noqa: F401  (the pybindings NEED libtorch)
    from executorch.extension.pybindings import _C

    try:
        from importlib.metadata import version

        et = version("executorch")
    except Exception:  # noqa: BLE001 - a version we cannot read is said as unknown
        et = "unknown"
    return {"machine": platform.machine(), "features": features() if platform.machine() == "aarch64" else [],
            "executorch": et, "backends": list(_C._get_registered_backend_names()),
            "import_s": round(time.perf_counter() - t0, 2)}


def run_one(job: dict) -> dict:
    """Load one program, run it on every input list, write its outputs."""
    import numpy as np
    import torch
    from executorch.extension.pybindings import _C

    t0 = time.perf_counter()
    with open(job["pte"], "rb") as fh:
        data = fh.read()
    try:
        module = _C._load_for_executorch_from_buffer(data)
        module.method_meta("forward")  # the program is parsed here, not before
    except Exception as exc:  # noqa: BLE001 - said as a load failure
        raise LoadFailed(str(exc)) from exc
    loaded = time.perf_counter()
    arrays = np.load(job["inputs"])
    lists: dict[int, dict[int, Any]] = {}
    for key in arrays.files:
        n, k = (int(p) for p in key[1:].split("_"))
        lists.setdefault(n, {})[k] = torch.from_numpy(np.ascontiguousarray(arrays[key]))
    out = {}
    for n in sorted(lists):
        outputs = module.run_method("forward", tuple(lists[n][k] for k in sorted(lists[n])))
        for k, o in enumerate(outputs):
            if isinstance(o, torch.Tensor):
                out[f"o{n}_{k}"] = o.detach().numpy()
    np.savez(job["outputs"], **out)
    del module, data
    return {"load_s": round(loaded - t0, 3), "run_s": round(time.perf_counter() - loaded, 3)}


def main(argv: list) -> int:
    facts = start()
    print(json.dumps(facts), flush=True)
    if argv[:1] == ["--check"]:
        return 0
    with open(argv[0]) as fh:
        jobs = json.load(fh)["programs"]
    for job in jobs:
        try:
            line = {"pte": job["pte"], "ok": True, **run_one(job)}
        except Exception as exc:  # noqa: BLE001 - one program's failure is its row's, the next one runs
            line = {"pte": job["pte"], "ok": False, "load": isinstance(exc, LoadFailed),
                    "error": f"{type(exc).__name__}: {exc}"[:400]}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
