"""Every patch pteforge makes to an upstream library, one module per library.

``torch_patches`` patches torch, ``executorch_patches`` ExecuTorch, ``torchao_patches``
torchao, ``coremltools_patches`` coremltools, ``onnx2torch_patches`` onnx2torch (named so that none shadows the library inside a relative import). Each module names the version
it was written against (``LIBRARY``, ``VERSION``); each patch, when it is applied, checks
that the installed library is that version and still has what the patch replaces
(:func:`require`), and raises :class:`~pteforge.core.errors.UpstreamChangedError` naming
the patch, the version expected and the one found otherwise: never a silent skip, and
never a patch of code it was not written for. Each patch puts back what it replaced on
exit. This package imports only ``pteforge.core`` and the upstream libraries.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from ..core.errors import UpstreamChangedError


@functools.cache
def _installed(library: str) -> str:
    try:
        return _version(library).split("+")[0]  # the release: a CPU and a CUDA build of one torch alike
    except PackageNotFoundError:
        return "none (not installed)"


def installed(library: str) -> str:
    """The installed version of ``library`` (its release, without a local ``+cpu`` part)."""
    return _installed(library)


def require(patch: str, library: str, expected: str, module: str, *targets: tuple) -> None:
    """Raise :class:`UpstreamChangedError` unless ``library`` is at ``expected`` and each
    ``(object, attribute)`` of ``targets`` exists; ``module`` is the patches module's name."""
    found = installed(library)
    fix = f"pin {library}=={expected} in uv.lock, or update pteforge/patches/{module}.py for {library} {found}"
    if found != expected:
        raise UpstreamChangedError(f"patch {patch} targets {library} {expected}, found {library} {found}", fix=fix)
    for obj, attr in targets:
        if not hasattr(obj, attr):
            name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", type(obj).__name__)
            raise UpstreamChangedError(f"patch {patch} targets {library} {expected}, found {library} {found} "
                                       f"without {name}.{attr}", fix=fix)


def source_digest(function) -> str:
    """The digest of ``function``'s source: what a patch that gives its answer was written from."""
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:8]


def source_changed(patch: str, library: str, expected: str, module: str, what: str, digests: tuple[str, str]):
    """The error for a patch whose target's source (``what``) is not the one it was written
    from: ``digests`` are the expected and the found digest of that source."""
    return UpstreamChangedError(
        f"patch {patch} targets {what} of {library} {expected} (source digest {digests[0]}), found {library} "
        f"{installed(library)} with source digest {digests[1]}",
        fix=f"pin {library}=={expected} in uv.lock, or update pteforge/patches/{module}.py")


@contextlib.contextmanager
def replaced(obj, attr: str, value):
    """``obj.attr`` is ``value`` inside; afterwards what it was (an attribute ``obj`` only
    inherited is removed again)."""
    own = attr in vars(obj) if isinstance(obj, type) else True
    real = vars(obj)[attr] if isinstance(obj, type) and own else getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        if own:
            setattr(obj, attr, real)
        else:
            delattr(obj, attr)
