from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import TypeGuard

from ..core.spec import Precision
from .base import Backend, Check, Docs

_PACKAGE = "executorch.backends.mlx.serialization"


METALLIB = ("needs MLX's Metal kernels, mlx.metallib, where it loads: the executorch_flutter app's native build "
            "installs it (its LLM runner takes the path: ExecuTorchLLM.load(mlxMetallibPath:)); elsewhere take "
            "executorch/lib/mlx.metallib from the macOS executorch wheel")


class MLX(Backend):
    name = "mlx"
    ray_resource = "macos"
    order = 45
    # seed 004's Apple chains extended: after Core ML and Metal on iOS/macOS for an image
    # model; the executorch_flutter app's LLM runner takes XNNPACK and MLX programs
    priority = {"desktop": 0}
    title = "MLX (Apple silicon GPU)"
    runtime_name = "MLXBackend"
    platforms = ("macos",)
    hardware = "GPU"
    use_case = "Apple silicon GPUs through MLX: language models on Macs"
    description = "Apple silicon GPU (MLX)"
    precisions = (Precision.FP32, Precision.FP16)
    default_precision = Precision.FP32
    llm_precisions = (Precision.FP32,)  # an fp16 language model would need its own cast; MLX's 4-bit one is not built yet
    docs = Docs(
        overview=(
            "The MLX delegate runs the graph on Apple silicon GPUs with Apple's MLX. It lowers "
            "in pure Python on any host; its programs run on macOS 14+ on Apple silicon, where the "
            "macOS executorch wheel registers MLXBackend."
        ),
        features=(
            "fp32 and fp16 compute (fp16: the model's weights and compute in half, fp32 inputs and outputs).",
            "Language models with their KV cache as program state (the executorch_flutter app's LLM runner "
            "takes XNNPACK and MLX programs).",
        ),
        target_requirements=(
            "An Apple silicon Mac, macOS 14+.",
            "Beside the .pte, MLX's Metal kernels: `mlx.metallib`. The macOS executorch wheel ships it "
            "(executorch/lib/mlx.metallib); the executorch_flutter app's native build installs it next to its "
            "library and passes its path to `ExecuTorchLLM.load(..., mlxMetallibPath:)`. Without it the load "
            "fails (error 0x23).",
        ),
        development_requirements=(
            "Nothing beyond the executorch pip package. ExecuTorch's Linux and Windows wheels leave out the MLX "
            "serializer's generated Python; pteforge generates it once with ExecuTorch's own generator "
            "(backends/mlx/serialization/generate.py) and flatc from the wheel, into its cache. The result is "
            "the same, file for file, as the macOS wheel's.",
        ),
        cmake_targets=("mlxdelegate",),
        build_flags=("-DEXECUTORCH_BUILD_MLX=ON",),
        prebuilt="Registered in the macOS (arm64) executorch pip wheel's runtime (libexecutorch_backend_mlx.dylib).",
        links=("https://github.com/ml-explore/mlx",),
    )
    code_sample = """from executorch.backends.mlx import MLXPartitioner
from executorch.backends.mlx.passes import get_default_passes
partitioner = [MLXPartitioner()]  # with transform_passes=get_default_passes()"""

    def lower_check(self) -> Check:
        if importlib.util.find_spec("executorch.backends.mlx") is None:
            return Check(False, "this executorch has no MLX backend", "install executorch>=1.5")
        if not _is_generated(_shipped()) and _flatc() is None:
            return Check(False, "the MLX serializer's generated code is not in this executorch wheel, and no flatc "
                                "to generate it", "install executorch's wheel with flatc, or export on a Mac")
        return Check(True, "its lowering is pure Python")

    def run_check(self, host) -> Check:
        check = super().run_check(host)
        if check.ok:
            return check
        return Check(False, check.reason, "run it on an Apple silicon Mac (macOS 14+): its executorch wheel registers MLXBackend")

    def _ready(self) -> None:
        serialization_importable()

    def partitioners(self, precision):
        self._ready()
        from executorch.backends.mlx import MLXPartitioner

        return [MLXPartitioner()]

    def plan(self, precision):
        self._ready()
        from executorch.backends.mlx.passes import get_default_passes
        from executorch.exir import EdgeCompileConfig

        plan = super().plan(precision)

        plan.transform_passes = get_default_passes()
        plan.edge_config = EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True)
        return plan

    def prepare(self, exported, precision, example):
        if precision is not Precision.FP16:
            return exported
        from .toolkit.fp16 import half_program

        return half_program(exported, example)

    def llm_partitioners(self, precision):
        return self.partitioners(precision)

    def llm_transform_passes(self):
        self._ready()
        from executorch.backends.mlx.passes import get_default_passes

        return get_default_passes()

    def caution(self, precision):
        return METALLIB


def _shipped() -> Path | None:
    spec = importlib.util.find_spec("executorch.backends.mlx")
    if spec is None:
        return None
    assert spec.submodule_search_locations is not None  # a package's spec
    return Path(spec.submodule_search_locations[0]) / "serialization"


def _is_generated(directory: Path | None) -> TypeGuard[Path]:
    return directory is not None and (directory / "mlx_graph_schema.py").exists() \
        and (directory / "_generated" / "__init__.py").exists()


def _flatc() -> str | None:
    spec = importlib.util.find_spec("executorch")  # a namespace package: no __file__
    for root in (spec.submodule_search_locations or []) if spec else []:
        bundled = Path(root) / "data" / "bin" / ("flatc.exe" if sys.platform == "win32" else "flatc")
        if bundled.exists():
            return str(bundled)
    return shutil.which("flatc")


def serialization_importable() -> Path:
    """The MLX serializer's package, with its generated code: the wheel's own where it ships
    it (macOS), else generated once into pteforge's cache by ExecuTorch's generator and
    imported from there (a finder for that one package; its modules are ExecuTorch's)."""
    shipped = _shipped()
    if _is_generated(shipped):
        return shipped

    from filelock import FileLock

    from ..core.io import cache_root

    root = cache_root() / "mlx" / f"executorch-{metadata.version('executorch')}"
    made = root / "serialization"
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".lock"), timeout=300):
        if not _is_generated(made):
            assert shipped is not None  # _ready runs where the backend is installed: its package is there
            _generate(shipped, root)
    if not any(isinstance(f, _GeneratedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _GeneratedFinder(made))
    return made


def _generate(shipped: Path, root: Path) -> None:
    flatc = _flatc()
    if flatc is None:
        raise RuntimeError("no flatc to generate the MLX serializer with: install executorch's wheel with flatc")
    work = root / ".work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(shipped, work / "serialization", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "runtime").mkdir()
    for template in ("MLXLoader.h.tmpl", "MLXLoader.cpp.tmpl"):  # its C++ loader's: not needed to lower
        (work / "serialization" / template).touch()
    done = subprocess.run([sys.executable, "generate.py", "--flatc", flatc], cwd=work / "serialization",
                          capture_output=True, text=True)
    if done.returncode != 0 or not _is_generated(work / "serialization"):
        raise RuntimeError(f"generating the MLX serializer failed: {(done.stderr or done.stdout).strip()[-300:]}")
    shutil.rmtree(root / "serialization", ignore_errors=True)
    (work / "serialization").rename(root / "serialization")
    shutil.rmtree(work, ignore_errors=True)


class _GeneratedFinder:
    """Imports ``executorch.backends.mlx.serialization`` from the generated copy; its
    submodules then come from that package's own path."""

    def __init__(self, directory: Path):
        self.directory = directory

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _PACKAGE:
            return None
        return importlib.util.spec_from_file_location(
            fullname, self.directory / "__init__.py", submodule_search_locations=[str(self.directory)])
