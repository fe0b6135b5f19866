"""Run one ExecuTorch program on the inputs of an .npz and write its outputs to an .npz.

Meant to run under the emulated aarch64 CPython (see setup.sh), and with the host venv's
python for the reference; the same code both ways:

    qemu-aarch64-static -cpu max -L ROOT ROOT/usr/bin/python3.11 run_pte.py M.pte in.npz out.npz
    .venv/bin/python run_pte.py M.pte in.npz out.npz

in.npz: input_0, input_1, ... in the method's order. out.npz: output_0, ... (tensors only).
Prints one JSON line: timings (import, load, first run, steady runs), the registered
backends, the machine.

--api pybind (default) imports executorch.extension.pybindings._C directly: it needs only
torch (its ELF NEEDs libtorch*.so and converts at::Tensor), not the exir stack that
executorch.runtime -> portable_lib -> executorch.exir._warnings pulls in. --api runtime
uses `executorch.runtime.Runtime`, with executorch.exir registered as a bare package so
that portable_lib's `import executorch.exir._warnings` does not import the compiler.

On aarch64 the PyPI torch wheel is a CUDA build whose CUDA libraries are stubs here
(make_cuda_stubs.py): before torch finishes importing we make it look like a CPU build
(no CUDA, no c10d/rpc: their pybind registrations construct NCCL objects).
"""

import argparse
import importlib.abc
import json
import os
import platform
import sys
import time


class _CpuOnlyTorch(importlib.abc.MetaPathFinder):
    """On the first import after torch._C loads, hide what the CUDA stubs cannot back."""

    done = False

    def find_spec(self, name, path, target=None):
        C = sys.modules.get("torch._C")
        if C is not None and not self.done:
            self.done = True
            for attr in ("_c10d_init", "_rpc_init", "_dist_autograd_init"):
                if hasattr(C, attr):
                    delattr(C, attr)  # torch.distributed(.rpc).is_available() -> False
            C._has_cuda = False  # torch.backends.cuda.is_built(): torch._native skips CUDA overrides
            C._has_cudnn = False
            C._cuda_getDeviceCount = lambda: 0  # torch.cuda.is_available() -> False
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pte")
    ap.add_argument("inputs")
    ap.add_argument("outputs")
    ap.add_argument("--runs", type=int, default=3, help="timed runs after the first")
    ap.add_argument("--api", choices=["pybind", "runtime"], default="pybind")
    ap.add_argument("--method", default="forward")
    a = ap.parse_args()

    t0 = time.perf_counter()
    if platform.machine() == "aarch64":
        sys.meta_path.insert(0, _CpuOnlyTorch())
    import numpy as np
    import torch

    t_torch = time.perf_counter()
    if a.api == "pybind":
        from executorch.extension.pybindings import _C

        backends = list(_C._get_registered_backend_names())
    else:
        # portable_lib imports executorch.exir._warnings, whose package __init__ pulls the
        # whole exir compiler (ruamel.yaml, ...): register executorch.exir as a bare package
        # so only _warnings.py (typing_extensions) runs
        if "executorch.exir" not in sys.modules:
            import importlib.util
            import types

            exir = types.ModuleType("executorch.exir")
            spec = importlib.util.find_spec("executorch.extension")  # namespace package
            base = os.path.dirname(list(spec.submodule_search_locations)[0])
            exir.__path__ = [os.path.join(base, "exir")]
            sys.modules["executorch.exir"] = exir
        from executorch.runtime import Runtime

        rt = Runtime.get()
        backends = list(rt.backend_registry.registered_backend_names)
    t_import = time.perf_counter()

    with open(a.pte, "rb") as f:
        data = f.read()
    if a.api == "pybind":
        module = _C._load_for_executorch_from_buffer(data)
        run = lambda xs: module.run_method(a.method, tuple(xs))  # noqa: E731
    else:
        method = rt.load_program(data).load_method(a.method)
        run = method.execute
    t_load = time.perf_counter()

    npz = np.load(a.inputs)
    inputs = [torch.from_numpy(np.ascontiguousarray(npz[f"input_{i}"])) for i in range(len(npz.files))]

    t1 = time.perf_counter()
    outs = run(inputs)
    t_first = time.perf_counter() - t1
    steady = []
    for _ in range(a.runs):
        t1 = time.perf_counter()
        run(inputs)
        steady.append(time.perf_counter() - t1)

    arrays = {f"output_{i}": o.detach().numpy() for i, o in enumerate(outs) if isinstance(o, torch.Tensor)}
    np.savez(a.outputs, **arrays)
    steady.sort()
    print(json.dumps({
        "machine": platform.machine(),
        "api": a.api,
        "backends": backends,
        "xnnpack_registered": "XnnpackBackend" in backends,
        "import_torch_s": round(t_torch - t0, 3),
        "import_s": round(t_import - t0, 3),
        "load_s": round(t_load - t_import, 4),
        "first_run_s": round(t_first, 6),
        "steady_run_s": round(steady[len(steady) // 2], 6) if steady else None,
        "runs": a.runs,
    }))


if __name__ == "__main__":
    main()
