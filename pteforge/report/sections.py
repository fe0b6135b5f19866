"""The report's sections, one list: EXPORT_SUMMARY.md and report.html walk it in order,
each taking the sections it has a renderer for. A new section is one entry here and its
renderers in :mod:`.markdown` and :mod:`.html`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import html as h
from . import markdown as md
from .manifest import Manifest


@dataclass(frozen=True)
class Section:
    """``markdown`` gives lines, ``html`` a ``<section>``; each takes (manifest, the run's
    failures, the validation report or None). None: the document has no such section."""

    name: str
    markdown: Callable[[Manifest, list, dict | None], list[str]] | None = None
    html: Callable[[Manifest, list, dict | None], str] | None = None


SECTIONS: tuple[Section, ...] = (
    Section("artifacts", lambda m, f, v: md.artifact_lines(m, f), lambda m, f, v: h.matrix_section(m, f)),
    Section("export time and size", lambda m, f, v: md.measured_lines(m, f)),  # the HTML's plots show them
    Section("inputs and outputs", lambda m, f, v: md.io_lines(m)),
    Section("precision", lambda m, f, v: md.precision_lines(m)),
    Section("load order", lambda m, f, v: md.fallback_lines(m), lambda m, f, v: h.fallback_section(m)),
    Section("numerics", lambda m, f, v: md.numerics_lines(m), lambda m, f, v: h.numerics_section(m)),
    Section("accuracy", html=lambda m, f, v: h.accuracy_section(m)),
    Section("validation", html=lambda m, f, v: h.validation_section(v)),
    Section("plots", html=lambda m, f, v: h.plots_section(m)),
    Section("failed", lambda m, f, v: md.failed_lines(m, f)),
)


def markdown(man: Manifest, failures: list[dict]) -> str:
    lines = md.header_lines(man, failures)
    for section in SECTIONS:
        if section.markdown is not None:
            lines += section.markdown(man, failures, None)
    return "\n".join(lines) + "\n"


def html_report(man: Manifest, failures: list[dict] | None = None, validation: dict | None = None) -> str:
    failures = failures or []
    return h.page(man, failures, "".join(s.html(man, failures, validation) for s in SECTIONS if s.html is not None))
