"""Imported by the fork server of a run without ``--debug``: the fork server is then as
quiet as the workers it forks (``workers.silence``)."""

from .workers import silence

silence()
