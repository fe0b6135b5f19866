"""The child process that opens ``.pte`` / ``.bpte`` files for the parent.

A damaged program can abort (SIGABRT) or segfault the process that loads it, so
pteforge never loads an untrusted file in its own process: it sends requests to
this child, one JSON line each, and reads one JSON line back. Native code that
prints to stdout is redirected to stderr so it cannot corrupt the protocol.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import warnings

from ..core import system
from ..core.errors import one_line
from ..core.native_log import captured
from ..core.timing import measure
from .host import Host, load_program
from .pte import DTYPES, program_delegates, program_operators


def _load(path: str):
    return load_program(path)


def _inspect(req: dict) -> dict:
    from executorch.exir._serialize._program import deserialize_pte_binary


    with open(req["path"], "rb") as f:
        data = f.read()
    if not data:
        raise ValueError("the file is empty")
    ident = data[4:8]
    if ident.startswith(b"BP"):
        raise ValueError("this is a bundled program (.bpte), not a .pte")
    if not ident.startswith(b"ET"):
        raise ValueError(f"not an ExecuTorch program (file identifier {ident!r}, expected b'ET..')")
    try:
        pte = deserialize_pte_binary(data)
    except Exception as exc:
        raise ValueError(f"damaged ExecuTorch program ({one_line(exc)[:160]})") from None
    program = getattr(pte, "program", pte)
    loaded = _load(req["path"])
    meta = loaded.metadata("forward")
    inputs = []
    for i in range(meta.num_inputs()):
        info = meta.input_tensor_meta(i)
        inputs.append({"shape": list(info.sizes()), "dtype": DTYPES.get(int(info.dtype()), str(info.dtype()))})
    return {"delegates": program_delegates(program), "operators": program_operators(program), "inputs": inputs}


def _run(req: dict) -> dict:
    import torch

    batches = torch.load(req["inputs"], weights_only=True)
    t0 = time.perf_counter()
    program = _load(req["path"])
    method = program.load_method("forward")
    load_ms = (time.perf_counter() - t0) * 1000
    outputs, times = [], []
    for inputs in batches:
        t0 = time.perf_counter()
        result = method.execute([t.contiguous() if isinstance(t, torch.Tensor) else t for t in inputs])
        times.append((time.perf_counter() - t0) * 1000)
        outputs.append([t.clone() for t in result if isinstance(t, torch.Tensor)])  # as flatten_outputs
    torch.save(outputs, req["outputs"])
    return {"load_ms": load_ms, "times_ms": times}


def _run_bundled(req: dict) -> dict:
    from executorch.extension.pybindings.portable_lib import (
        _load_bundled_program_from_buffer,
    )

    with open(req["path"], "rb") as f:
        data = f.read()
    if data[4:8][:2] != b"BP":
        raise ValueError(f"not a bundled program (file identifier {data[4:8]!r}, expected b'BP..')")
    bundle = _load_bundled_program_from_buffer(data)
    for idx in range(req["testsets"]):
        # loads test case idx's inputs, runs the method, compares with its expected outputs
        bundle.verify_result_with_bundled_expected_output(
            "forward", idx, rtol=req.get("rtol", 1e-3), atol=req.get("atol", 1e-3)
        )
    return {"testsets": req["testsets"]}


def _bench(req: dict) -> dict:
    import torch


    inputs = [t.contiguous() if isinstance(t, torch.Tensor) else t for t in torch.load(req["inputs"], weights_only=True)[0]]
    reset = system.reset_peak_rss()  # the peak RSS of this artifact alone, where the OS can say it
    rss_before = system.rss_mb()
    t0 = time.perf_counter()
    method = _load(req["path"]).load_method("forward")
    load_ms = (time.perf_counter() - t0) * 1000
    stats = measure(lambda: method.execute(inputs), req.get("runs", 20), req.get("warmup", 3), req.get("budget_s"))
    peak = system.peak_rss_mb(reset)
    return {
        "load_ms": load_ms,
        **stats,
        **({"peak_rss_mb": peak} if peak is not None else {}),
        "rss_added_mb": max(0.0, system.rss_mb() - rss_before),
        "threads": system.thread_count(),
        "torch_threads": torch.get_num_threads(),
    }


def _load_method(req: dict) -> dict:
    _load(req["path"]).load_method("forward")  # delegates initialise here
    return {}


def _host(req: dict) -> dict:
    return Host.here().to_dict()


def _call(req: dict) -> dict:
    """``IsolatedRuntime.call``: a function of pteforge's own, by its module and name."""
    module, _, name = req["call"].partition(":")
    if not module.startswith("pteforge."):  # the parent names its own code; nothing else runs here
        raise ValueError(f"{req['call']} is not a function of pteforge's")
    return getattr(importlib.import_module(module), name)(req)


HANDLERS = {
    "call": _call,
    "inspect": _inspect,
    "run": _run,
    "run_bundled": _run_bundled,
    "load": _load_method,
    "bench": _bench,
    "host": _host,
}


def main() -> None:
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # native prints go to stderr, never into the protocol
    sys.stdout = sys.stderr

    import torch

    warnings.filterwarnings("ignore")
    # Torch only moves tensors in and out here; ExecuTorch's delegates bring their own
    # threads (XNNPACK's pthreadpool, OpenVINO's TBB). With more than one torch thread,
    # the output copy after each run wakes OpenMP workers that keep spinning on the
    # cores those threads need: measured on 2 cores, yolo11n's OpenVINO .pte took 17 ms
    # instead of 13 and its XNNPACK .pte 28 instead of 23. An app has no torch at all.
    torch.set_num_threads(1)
    log = os.environ.get("PTEFORGE_RUNTIME_LOG")  # each request's native log, read by the parent if this dies
    for line in sys.stdin:
        req = json.loads(line)
        try:
            with captured(log):  # a failure's message says what the runtime logged about it
                reply = {"ok": True, **HANDLERS[req["op"]](req)}
        except Exception as exc:  # a handler marks the step it failed in (``exc.stage``: "load")
            reply = {"ok": False, "error": one_line(exc), **({"stage": exc.stage} if hasattr(exc, "stage") else {})}
        out.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
