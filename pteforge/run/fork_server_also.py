"""Imported last by the fork server, when the run's backends name modules for it
(``Backend.fork_server_imports``, passed in ``ALSO``): each one that imports is then
there for every worker. One that fails is left to the job that needs it, which says why;
the fork server itself must not fail (``multiprocessing``'s preload lets only an
``ImportError`` pass)."""

import importlib
import os

from .workers import ALSO

for _name in filter(None, os.environ.get(ALSO, "").split(",")):
    try:
        importlib.import_module(_name)
    except Exception:  # noqa: BLE001, S110 - the job that needs it imports it again and says what fails
        pass
