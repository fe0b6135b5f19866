"""Imported first by the fork server (``workers._context``), before torch and ExecuTorch:

- the imports after it run at the collector's thresholds of
  ``core.system.fewer_collections`` (its collections took 1.2 s of 5.9 s of imports at
  Python's defaults, 0.4 s at these), and each worker it forks freezes them;
- when it ends (the process that started it has ended), its exit handlers run and then it
  leaves without taking its interpreter apart: tearing down torch's and ExecuTorch's
  modules took 1.4-2.0 s of a core after every run, beside whatever ran next.
"""

import atexit
import os
import sys

from ..core.system import fewer_collections


def _leave() -> None:
    for stream in (sys.stdout, sys.stderr):  # what --debug shows of it
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


fewer_collections(freeze=False)
atexit.register(_leave)  # registered first, so it runs last
