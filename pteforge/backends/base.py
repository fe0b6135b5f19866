"""The backend contract. One backend is one file in this package.

A backend file is the single source of truth for that backend: the CLI choices,
the availability table, the manifest and the contract tests all read it.
Adding a backend means adding one file that subclasses :class:`Backend`: a file in
this package is found by its name, and a third-party package's class through the
``pteforge.backends`` entry-point group (``backends/__init__.py``).

Contract
--------
* Class attributes are data: ``name`` (CLI spelling), ``runtime_name`` (the
  delegate id ExecuTorch writes into the ``.pte`` and registers at run time, or
  ``None`` when the backend delegates nothing), platforms, hardware, typical use,
  the precisions it takes and its default, what it needs to lower, and the
  documentation sections of the seed template.
* ``lower_check()`` answers "can it lower here?" and ``run_check()`` answers "can
  its programs run on this host?"; each returns a :class:`Check` with a reason and,
  when not ok, a fix. They must be cheap and must not import the backend's SDK
  in a way that can fail loudly, download or crash: they are called before any
  work starts.
* ``partitioners(precision)`` returns the real partitioners with their compile
  specs; ``quantizer(precision)`` returns a PT2E quantizer for quantized
  precisions. Heavy SDK imports happen inside these methods, never at module
  import: a missing SDK makes one backend unavailable, not the tool unusable.
* ``recipe(precision)`` may return ExecuTorch's own ``executorch.export`` recipe
  for that precision; ``plan(precision)`` turns it (or, without one, the methods
  above) into a :class:`Plan`: quantizer, partitioners, edge config and passes,
  backend config. A backend fixes what its recipe gets wrong in ``plan``.
* ``lower(...)`` turns an ExportedProgram into an ``EdgeProgramManager``; the
  default calls ``to_edge_transform_and_lower`` with the plan's partitioners
  first and then those of the rest of the chain, in priority order.
  ``lowering_context()`` is what a lowering runs inside for every backend of the
  chain, first or later (XNNPACK's and Vulkan's pattern graphs, made only where
  one can match).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ..core.result import Check  # noqa: F401 - a backend's verdicts; backends import it from here
from ..core.spec import Precision
from ..core.system import os_name as this_os

if TYPE_CHECKING:  # pragma: no cover
    from torch.export import ExportedProgram

    from ..runtime.host import Host


@contextlib.contextmanager
def narrowed_support(module, name: str, accepts):
    """Inside, ``module.<name>`` (the operator-support class a partitioner builds for each
    partition, with no hook to pass another) takes a node only when it did and
    ``accepts(support, submodules, node)`` says so too: how Core ML and OpenVINO keep out
    nodes their converters or runtimes fail on."""
    base: Any = getattr(module, name)  # a class of the partitioner's module

    class Narrowed(base):
        def is_node_supported(self, submodules, node):
            return super().is_node_supported(submodules, node) and accepts(self, submodules, node)

    setattr(module, name, Narrowed)
    try:
        yield
    finally:
        setattr(module, name, base)


# The platform names the executorch_flutter app filters its models by.
APP_PLATFORMS = ("android", "ios", "macos", "linux", "windows", "web")

# Where the executorch_flutter app can load each delegate, read from its source: the
# backends its native builds link per platform (packages/executorch_dart/lib/src/build/
# run_build.dart, _getBackendDefines, at 5ee4c6f8; the prebuilt variants of its
# executorch_native submodule's scripts/build-*.sh at 943005ad): xnnpack everywhere (web:
# Wasm, backend_query_web.dart); coreml on ios and macos; metal on Apple-silicon macOS
# only; vulkan on all but web (opt-in); qnn on android (opt-in, source builds); mlx, for
# language models, on Apple-silicon macOS (its xnnpack-mlx-llm build). The app
# maps these names (model_registry.dart _stringToBackend) and skips an entry whose backend
# a device lacks; a name it does not know it does NOT skip, and loading that file fails.
# So a backend not in this table (openvino, tosa, ethos-u, cortex-m, vgf, mps, mediatek,
# samsung, ...) is offered on no platform: its files stay on disk and in the manifest's
# ``notForApp``. A program with no delegate (portable) loads wherever the runtime does.
APP_LOADS: dict[str, tuple[str, ...]] = {
    "xnnpack": APP_PLATFORMS,
    "portable": APP_PLATFORMS,
    "coreml": ("ios", "macos"),
    "metal": ("macos",),
    "vulkan": ("android", "ios", "macos", "linux", "windows"),
    "qnn": ("android",),
    "mlx": ("macos",),  # the language-model runner's xnnpack-mlx-llm build, Apple-silicon macOS
}


@dataclass
class Plan:
    """How one precision of one backend is produced from a captured program."""

    partitioners: list[Any] = field(default_factory=list)
    quantizer: Any | None = None  # PT2E quantizer, for quantized precisions
    edge_config: Any | None = None  # EdgeCompileConfig
    edge_passes: list[Any] = field(default_factory=list)  # callables(EdgeProgramManager) -> [pass]
    # ExportedProgram passes run on the edge program before partitioning
    transform_passes: list[Any] = field(default_factory=list)
    executorch_config: Any | None = None  # ExecutorchBackendConfig for to_executorch
    recipe: str | None = None  # the executorch.export recipe it was built from
    # quantize(module, batches) -> module: a backend's own PTQ flow instead of
    # prepare_pt2e/convert_pt2e with ``quantizer``
    quantize: Any | None = None
    # for_quantizer(module, example) -> module: the program the quantizer annotates, where a
    # backend needs it otherwise than captured (Cortex-M: activations laid out NHWC)
    for_quantizer: Any | None = None

    @classmethod
    def from_recipe(cls, recipe) -> "Plan":
        q = recipe.quantization_recipe
        low = recipe.lowering_recipe
        return cls(
            partitioners=list(low.partitioners or []) if low else [],
            quantizer=(q.quantizers[0] if q and q.quantizers else None),
            edge_config=low.edge_compile_config if low else None,
            edge_passes=list(low.edge_manager_transform_passes or []) if low else [],
            executorch_config=recipe.executorch_backend_config,
            recipe=recipe.name,
        )


@dataclass(frozen=True)
class Requirement:
    """A Python package the backend needs to lower: import name, how to get it, and its
    distribution name (recorded in the manifest's ``versions`` and the cache key)."""

    module: str
    install: str  # e.g. "uv pip install 'coremltools>=9'"
    package: str | None = None  # distribution name when it differs from ``module``

    @property
    def distribution(self) -> str:
        return self.package or self.module


@dataclass(frozen=True)
class Docs:
    """The sections of the seed's backend documentation template."""

    overview: str
    features: tuple[str, ...] = ()
    target_requirements: tuple[str, ...] = ()
    development_requirements: tuple[str, ...] = ()
    cmake_targets: tuple[str, ...] = ()  # libraries an app links (whole-archive)
    build_flags: tuple[str, ...] = ()  # -DEXECUTORCH_BUILD_...=ON
    prebuilt: str = ""  # is it in the prebuilt Android / iOS / pip packages?
    links: tuple[str, ...] = ()


class Backend:
    name: ClassVar[str]
    order: ClassVar[int] = 1000  # place in tables, help and docs (built-ins: the seed's table order)
    # seed 004's per-platform priority, lower first: {"ios": 0} puts it first on iOS
    priority: ClassVar[dict[str, int]] = {}
    # A CPU backend every platform can fall back to: apps try these last, in this order
    # (1 first), after every accelerator's artifact; 0 for the others.
    cpu_fallback: ClassVar[int] = 0
    # The fp32 program a reduced precision is measured against when its own backend takes
    # no fp32 (the portable kernels'): one backend says so.
    fp32_reference: ClassVar[bool] = False
    title: ClassVar[str]
    runtime_name: ClassVar[str | None] = None
    # Backends that delegate nothing but rewrite operators to their own kernels
    # (cortex_m::, cadence::) name that namespace: an artifact must contain one of them.
    ops_namespace: ClassVar[str | None] = None
    app_name: ClassVar[str | None] = None  # spelling the Flutter app knows; defaults to name
    aliases: ClassVar[tuple[str, ...]] = ()
    platforms: ClassVar[tuple[str, ...]]
    hardware: ClassVar[str]
    use_case: ClassVar[str]
    description: ClassVar[str] = ""  # the manifest's backendDescription
    precisions: ClassVar[tuple[Precision, ...]] = (Precision.FP32,)
    default_precision: ClassVar[Precision] = Precision.FP32
    requires: ClassVar[tuple[Requirement, ...]] = ()
    # host OSes (linux, macos, windows) where its lowering cannot run, and why: what
    # `pteforge backends --host OS` says of a host other than this one
    lowers_not_on: ClassVar[dict[str, str]] = {}
    # precisions it exports language models at (pteforge.text.llm), with llm_partitioners()
    llm_precisions: ClassVar[tuple[Precision, ...]] = ()
    llm_dynamic_shapes: ClassVar[bool] = True  # False: the program takes one token per call
    # True: its runtime links ExecuTorch's llama:: kernels, so the KV cache is written in place
    # and attention is one fused kernel (pteforge.text.kvcache); False: transformers' own attention
    llm_fused_attention: ClassVar[bool] = False
    # precisions whose source_transform() changes the eager model before capture
    source_transform_precisions: ClassVar[tuple[Precision, ...]] = ()
    docs: ClassVar[Docs]
    # --executor ray: the custom Ray resource of the nodes that have this backend's SDK (e.g.
    # "macos", given with `ray start --resources '{"macos": 1}'`); its jobs run there when
    # the cluster has such a node, anywhere otherwise
    ray_resource: ClassVar[str | None] = None
    # a job's time relative to XNNPACK's fp32 one on the same model (measured on
    # mobilenet_v3_small, two jobs side by side on 2 cores): the scheduler's guess for
    # starting the longest jobs first, until a run has measured them (pteforge.run.schedule)
    cost: ClassVar[float] = 1.0
    # Targets of one model and precision whose first backends name the same group run on
    # one worker, one after another: the later ones take the quantized and edge programs
    # the first made from that worker's memory (stages/memo.py). For backends whose
    # quantizers and partitioners usually agree on both (Arm's TOSA-based ones).
    memo_group: ClassVar[str | None] = None
    # Modules its jobs import that the fork server imports once for every worker, when a
    # run plans this backend (run.workers.start_fork_server): a few tenths of a second that
    # jobs on both workers would each spend, and that the fork server has time for while
    # the model is captured. Not a backend's heavy SDK (coremltools: 1.6 s, longer than
    # that wait), which only the workers that lower for it import.
    fork_server_imports: ClassVar[tuple[str, ...]] = ()
    # Example partitioner code for the docs ("Using <backend>").
    code_sample: ClassVar[str] = ""
    # What proves its programs on a host without the target, in a few words ("Arm's TOSA
    # reference model"): where simulators() has a stand-in for each delegate the program
    # calls and PyTorch has every kernel, the program runs there (backends/toolkit/simulate.py) and
    # its row is SIMULATED. None: only a device runs it.
    simulated_on: ClassVar[str | None] = None

    # ---- availability -------------------------------------------------------------

    def lower_check(self) -> Check:
        """Can this backend lower a model here? Default: its packages are installed."""
        for req in self.requires:
            if not _module_exists(req.module):
                return Check(False, f"Python package '{req.module}' is not installed", req.install)
        return Check(True, "its Python packages are installed")

    def lower_check_on(self, os_name: str) -> Check:
        """Can it lower on host OS ``os_name``? This host: :meth:`lower_check`; another: the
        declared ``lowers_not_on``."""
        if os_name == this_os():
            return self.lower_check()
        if os_name in self.lowers_not_on:
            where = [o for o in ("linux", "macos", "windows") if o not in self.lowers_not_on]
            return Check(False, self.lowers_not_on[os_name], f"export on {' or '.join(where)}" if where else None)
        return Check(True, f"its Python packages install on {os_name}")

    def run_check(self, host: "Host") -> Check:
        """Can this backend's programs run on ``host`` (its delegate, or its kernels, there)?"""
        if self.runtime_name is not None:
            if self.runtime_name in host.backends:
                return Check(True, f"{self.runtime_name} is registered in {host.where}")
            return Check(False, f"{self.runtime_name} is not registered in {host.where}",
                         f"run it on a device: {', '.join(self.platforms)}")
        if self.ops_namespace is not None:
            if any(op.startswith(f"{self.ops_namespace}::") for op in host.operators):
                return Check(True, f"the {self.ops_namespace}:: kernels are in {host.where}")
            return Check(False, f"the {self.ops_namespace}:: kernels are not in {host.where}",
                         f"run it on a device whose ExecuTorch links them: {', '.join(self.platforms)}")
        return Check(True, "runs on the portable CPU kernels")

    # ---- lowering ----------------------------------------------------------------

    def partitioners(self, precision: Precision) -> list[Any]:
        raise NotImplementedError

    def quantizer(self, precision: Precision) -> Any | None:
        """A PT2E quantizer for ``precision``; ``None`` when no PT2E pass is needed."""
        return None

    def edge_compile_config(self) -> Any | None:
        return None

    def recipe(self, precision: Precision) -> Any | None:
        """ExecuTorch's ``executorch.export`` recipe for ``precision``, where one exists."""
        return None

    def plan(self, precision: Precision) -> Plan:
        recipe = self.recipe(precision)
        if recipe is not None:
            return Plan.from_recipe(recipe)
        return Plan(
            partitioners=self.partitioners(precision),
            quantizer=self.quantizer(precision) if precision.quantized else None,
            edge_config=self.edge_compile_config(),
        )

    def llm_partitioners(self, precision: Precision) -> list[Any]:
        """The partitioners of a language model's program (its KV cache a mutable buffer)."""
        raise NotImplementedError(f"{self.name} does not export language models")

    def llm_transform_passes(self) -> list[Any]:
        """Edge passes a language model's lowering runs before partitioning (default: none)."""
        return []

    def llm_prepare(self, exported: "ExportedProgram") -> "ExportedProgram":
        """Rewrite a language model's captured program before lowering (default: as is)."""
        return exported

    def source_transform(self, precision: Precision) -> Any | None:
        """A torchao config applied to the eager model before capture (weight-only int4)."""
        return None

    def prepare(self, exported: "ExportedProgram", precision: Precision, example: tuple) -> "ExportedProgram":
        """Rewrite the captured program for ``precision`` before lowering (default: as is)."""
        return exported

    def fit(self, exported: "ExportedProgram", partitioners: list[Any]) -> list[Any]:
        """This backend's ``partitioners`` as ``exported`` needs them (default: as they are;
        Core ML raises its deployment target for a program holding fp16 values)."""
        return partitioners

    def simulators(self) -> list:
        """Stand-ins here for the payloads of its delegate (``backends.toolkit.simulate.Simulator``);
        empty when none is installed or it delegates nothing."""
        return []

    def estimates(self, payloads: list[bytes]) -> dict | None:
        """Its compiler's own estimates for these delegate payloads of a program it lowered
        in this process (Vela's cycles, SRAM and flash), or None."""
        return None

    def pattern_sets(self) -> list[tuple]:
        """(module, build, name) of each pattern set this backend makes only where one can
        match (backends/toolkit/patterns.py keeps what each holds, per installed version)."""
        return []

    def keyed_pattern_sets(self) -> list[tuple]:
        """(module, attr, run) of each pattern builder this backend calls only for patterns
        that can match: ``run()`` asks for every pattern it builds."""
        return []

    def lowering_context(self):
        """What a lowering with this backend's partitioner runs inside, first in its chain or
        not (default: nothing; XNNPACK and Vulkan: their pattern graphs only where one can
        match, backends/toolkit/patterns.py)."""
        return contextlib.nullcontext()

    def lower(self, exported: "ExportedProgram", plan: Plan, rest: list[Any]) -> Any:
        from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
        from torch._export.verifier import SpecViolationError

        kwargs = {}
        if plan.edge_config is not None:
            kwargs["compile_config"] = plan.edge_config
        if plan.transform_passes:
            from executorch.exir.pass_manager import ExportedProgramPassManager

            kwargs["transform_passes"] = ExportedProgramPassManager(plan.transform_passes)
        try:
            edge = to_edge_transform_and_lower(exported, partitioner=[*plan.partitioners, *rest], **kwargs)
        except SpecViolationError as exc:
            if "mismatched dtypes" not in str(exc) and "not in Core ATen opset" not in str(exc):
                raise
            # ExecuTorch's edge dialect lists the dtypes of each operator's arguments and
            # results, and leaves out some that are right and that its kernels run: the
            # magnitude of a complex STFT (abs: complex64 -> float32) failed an audio model
            # here, while XNNPACK's recipe, which lowers without the check (as Core ML's and
            # TOSA's do), ran it on the portable kernels. An operator outside the Core ATen set
            # (rand_like) is lowered the same way: whether a kernel library has it is then said
            # as for every other target (core.kernels). Running the program against eager is the proof.
            config = kwargs.get("compile_config") or EdgeCompileConfig()
            kwargs["compile_config"] = dataclasses.replace(config, _check_ir_validity=False)
            edge = to_edge_transform_and_lower(exported, partitioner=[*plan.partitioners, *rest], **kwargs)
        for make_passes in plan.edge_passes:  # as executorch.export's pipeline applies them
            passes = make_passes(edge)
            if passes:
                edge = edge.transform(passes)
        return edge

    def lowering_key(self, precision: Precision) -> tuple:
        """What decides the program this backend lowers at ``precision``. Targets whose
        chains have equal keys make byte-identical programs, so a run lowers them once and
        copies the program (tests/backends/test_contract.py holds every such claim)."""
        return (self.name, precision.value)

    def runtime_precision(self, precision: Precision) -> str | None:
        """The precision the host runtime really computes in, when it differs from ``precision``."""
        return None

    def caution(self, precision: Precision) -> str | None:
        """What devices are known to do wrong with this precision's programs: said beside
        every artifact of it (default: nothing known)."""
        return None

    def expected_delegate(self) -> str | None:
        """The delegate id an artifact of this backend must contain (None: no delegate)."""
        return self.runtime_name

    def manifest_name(self) -> str:
        return self.app_name or self.name

    def app_platforms(self) -> list[str]:
        """``platforms`` in the executorch_flutter app's words (android, ios, macos, linux,
        windows, web): where the app loads this backend's programs (``APP_LOADS``, read
        from the app's source), of the platforms the backend runs on; [] where it loads
        them on none (microcontrollers, NPUs, host-only runtimes)."""
        loads = APP_LOADS.get(self.manifest_name(), ())
        return [p for p in self.platforms if p in loads]

    def __repr__(self) -> str:
        return f"<backend {self.name} ({type(self).__module__})>"


def _module_exists(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def env_dir_check(var: str, what: str, fix: str) -> Check | None:
    """A failing Check when the SDK directory in ``$var`` is missing; None when fine."""
    root = os.environ.get(var)
    if not root:
        return Check(False, f"{what}: ${var} is not set", fix)
    if not os.path.isdir(root):
        return Check(False, f"{what}: ${var}={root} is not a directory", fix)
    return None


def platform_check(platform: str, what: str) -> Check | None:
    if not sys.platform.startswith(platform):
        return Check(False, f"{what} lowers only on {platform} (this is {sys.platform})", f"export on a {platform} machine")
    return None


@dataclass(frozen=True)
class Availability:
    name: str
    lower: Check
    run: Check


def chain_precisions(chain, precision) -> list:
    """The precision each backend of a chain lowers at: the first at ``precision``, a later
    one at ``precision`` when it takes it, else at its default."""
    return [precision if i == 0 or precision in b.precisions else b.default_precision for i, b in enumerate(chain)]
