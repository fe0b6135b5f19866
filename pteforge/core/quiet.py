"""Library chatter kept off the terminal of a run without ``--debug`` or ``--verbose``.

Python's warnings are ignored and the root logger shows warnings and above; torch's loggers
need more. Torch gives them handlers of its own and sets their levels when it is imported,
so a level set before has no effect, and a process that imports torch later than the
command starts (a result unpickled in the command's process, the runtime asked there) then
prints what torch logs at import: torchao's import logs a deprecation on torch's logger
(``KernelPreference ... register_constant()``). ``quiet_libraries`` holds torch's loggers
to errors from the first import after torch has set them up.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
import warnings


class _TorchLogsHeld(importlib.abc.MetaPathFinder):
    """Consulted before every import that is not done yet; finds nothing itself. Once torch
    has set up its loggers (its top logger has its handler), holds that logger to errors,
    and again if torch sets it up anew (``torch._logging.set_logs``)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - importlib's signature
        if "torch" in sys.modules:
            log = logging.getLogger("torch")
            if log.handlers and log.level < logging.ERROR:
                log.setLevel(logging.ERROR)
        return None


def quiet_libraries(torch_logs: bool = False) -> None:
    """Warnings ignored and logging above INFO only, in this process; ``torch_logs``: torch's
    loggers held to errors too (a terminal's process: a worker's go to the run's log)."""
    warnings.filterwarnings("ignore")
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger().setLevel(logging.WARNING)
    if not torch_logs:
        return
    if not any(isinstance(f, _TorchLogsHeld) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchLogsHeld())
    _TorchLogsHeld().find_spec("")  # torch imported already: held now
