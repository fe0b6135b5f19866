"""Backend documentation pages, generated from the backend files, in ExecuTorch's backend page template."""

from __future__ import annotations

from pathlib import Path

from ..backends import availability, default_registry
from ..backends.base import Backend
from ..core.io import write_atomic
from ..runtime.host import Host, recorded_runtimes

_QUANTIZED_SAMPLE = """
# {title} takes int8: quantize with its PT2E quantizer first
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)
for batch in calibration_batches:  # a few representative inputs
    prepared(*batch)
exported = torch.export.export(convert_pt2e(prepared), example_inputs)
"""


def page(backend: Backend, lower, run) -> str:
    """The backend's page (ExecuTorch's backend-page template), with what this machine can do."""
    return "\n".join([*_about(backend, lower, run), *_usage(backend), *_integration(backend)])


def _about(backend: Backend, lower, run) -> list[str]:
    d = backend.docs
    lines = [f"# {backend.title} backend", "", d.overview, ""]
    if d.links:
        lines += [f"Vendor documentation: {', '.join(d.links)}", ""]
    lines += [
        "| name | platforms | hardware | typical use | precisions (default first) | runtime delegate |",
        "|---|---|---|---|---|---|",
        f"| `{backend.name}` | {', '.join(backend.platforms)} | {backend.hardware} | {backend.use_case} | "
        + ", ".join([backend.default_precision.value, *[p.value for p in backend.precisions if p is not backend.default_precision]])
        + f" | {backend.runtime_name or 'none (no delegate)'} |",
        "",
        "## Features",
        "",
        *[f"- {f}" for f in d.features],
        "",
        "## Target Requirements",
        "",
        *[f"- {t}" for t in d.target_requirements],
        "",
        "## Development Requirements",
        "",
        *[f"- {t}" for t in d.development_requirements],
        "",
        "On the machine that generated this page (Linux x86-64, Python 3.11, ExecuTorch 1.5.1):",
        "",
        f"- lowers here: {'yes' if lower.ok else 'no'} — {lower.reason}" + (f" (fix: {lower.fix})" if not lower.ok and lower.fix else ""),
        f"- runs here: {'yes' if run.ok else 'no'} — {run.reason}",
        *([f"- proven here without a device: on {backend.simulated_on} (status SIMULATED; see the README's "
           "\"Reference simulators\")"] if backend.simulated_on and not run.ok else []),
        "",
    ]
    return lines


def _usage(backend: Backend) -> list[str]:
    lines = [
        f"## Using {backend.title}",
        "",
        "With pteforge:",
        "",
        "```bash",
        f"pteforge export --mobilenet --backends {backend.name}",
        "```",
        "",
        "The same with ExecuTorch's API:",
        "",
        "```python",
        "import torch",
        "import torchvision.models as models",
    ]
    if "edge = " in backend.code_sample:  # its own flow from the model, to an edge program
        return lines + [
            "",
            "model = models.mobilenet_v3_small(weights=\"DEFAULT\").eval()",
            "example_inputs = (torch.randn(1, 3, 224, 224),)",
            backend.code_sample,
            "program = edge.to_executorch()",
            f'with open("mobilenet_v3_small_{backend.name}.pte", "wb") as f:',
            "    program.write_to_file(f)",
            "```",
            "",
        ]
    lines += [
        "from executorch.exir import to_edge_transform_and_lower",
        backend.code_sample,
        "",
        "model = models.mobilenet_v3_small(weights=\"DEFAULT\").eval()",
        "example_inputs = (torch.randn(1, 3, 224, 224),)",
        "exported = torch.export.export(model, example_inputs)",
    ]
    if backend.default_precision.quantized and backend.runtime_name:
        lines += _QUANTIZED_SAMPLE.format(title=backend.title).strip("\n").splitlines()
    lines += [
        "program = to_edge_transform_and_lower(exported, partitioner=partitioner).to_executorch()",
        f'with open("mobilenet_v3_small_{backend.name}.pte", "wb") as f:',
        "    program.write_to_file(f)",
        "```",
        "",
    ]
    return lines


def _integration(backend: Backend) -> list[str]:
    d = backend.docs
    lines = ["## Runtime Integration", ""]
    if d.cmake_targets:
        targets = " ".join(d.cmake_targets)
        whole = " ".join(f'"$<LINK_LIBRARY:WHOLE_ARCHIVE,{t}>"' for t in d.cmake_targets)
        lines += [
            f"Build ExecuTorch with {' '.join(f'`{f}`' for f in d.build_flags) or 'the default options'} and link "
            f"{', '.join(f'`{t}`' for t in d.cmake_targets)}. Backends register themselves in static "
            "initialisers, so link them whole-archive or the linker drops the registration:",
            "",
            "```cmake",
            'add_subdirectory("executorch")',
            f"target_link_libraries(my_app PRIVATE executorch {whole})",
            f"# the plain targets: {targets}",
            "```",
            "",
        ]
    lines += [f"Prebuilt packages: {d.prebuilt}", ""]
    if backend.runtime_name:
        lines += [f"Any `.pte` holding `{backend.runtime_name}` delegates runs once the backend is linked; "
                  "nothing else is needed at run time.", ""]
    lines += [
        "## Reference",
        "",
        "- Partitioner options, quantization schemes and troubleshooting: ExecuTorch's "
        f"backend documentation for {backend.title}.",
        "- pteforge's contract for this backend: `pteforge/backends/"
        f"{type(backend).__module__.rsplit('.', 1)[-1]}.py`.",
        "",
    ]
    return lines


HOST_OSES = ("linux", "macos", "windows")


def hosts_page() -> str:
    """``index.md``: per backend, whether it lowers and whether its programs run on each host
    OS, from the backends' declared lowering hosts and each OS's recorded ExecuTorch wheel
    (the same answers as ``pteforge backends --host OS``, without this machine's own checks)."""
    runtimes = recorded_runtimes()
    hosts = {os: Host.recorded(os) for os in HOST_OSES}
    lines = [
        "# Backends by host OS",
        "",
        "Where each backend lowers (exports) and where its programs run and are verified on the",
        "host, for the host OSes pteforge installs on. *Lowers*: its Python packages and SDK",
        "install there (the SDK a backend needs beside pteforge is on its page). *Runs*: the",
        f"ExecuTorch {runtimes['executorch']} wheel for that OS registers its delegate, so `export`",
        "verifies its programs there against eager PyTorch. `pteforge backends` answers for the",
        "machine it runs on, with its own checks; `pteforge backends --host OS` for another.",
        "",
        "| backend | " + " | ".join(f"{os}: lowers | {os}: runs" for os in HOST_OSES) + " |",
        "|---|" + "---|---|" * len(HOST_OSES),
    ]
    for backend in default_registry():
        cells = []
        for os in HOST_OSES:
            lower = backend.lower_check_on(os) if os in backend.lowers_not_on else None
            run = backend.run_check(hosts[os])
            cells += ["✗" if lower else "✓", "✓" if run.ok else "✗"]
        lines.append(f"| [{backend.name}]({backend.name}.md) | " + " | ".join(cells) + " |")
    lines += ["", "Why not, where a backend does not lower:", ""]
    for backend in default_registry():
        for os, why in backend.lowers_not_on.items():
            lines.append(f"- {backend.name} on {os}: {why}.")
    lines += ["", "The wheels the *runs* columns were read from:", ""]
    lines += [f"- {os}: `{r['wheel']}`: {', '.join(r['backends'])}" for os, r in runtimes["hosts"].items()]
    return "\n".join(lines) + "\n"


def write_docs(directory: Path, host) -> list[Path]:
    written = [Path(directory) / "index.md"]
    write_atomic(written[0], hosts_page())
    for backend in default_registry():
        a = availability(backend, host)
        path = Path(directory) / f"{backend.name}.md"
        write_atomic(path, page(backend, a.lower, a.run))
        written.append(path)
    return written
