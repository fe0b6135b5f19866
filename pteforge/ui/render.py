"""Everything the terminal shows, with rich: progress, summaries, tables, errors.

Results go to stdout; progress and errors go to stderr, so `pteforge ... > log`
keeps the summary clean.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.status import Status as RichStatus

from ..backends import default_registry
from ..core.io import json_text
from ..core.kernels import app_unlinked
from ..core.result import Record, Stage, Status, accuracy_text, estimate_text, proof_counts
from ..core.spec import WEIGHTS_PRETRAINED
from ..families import family
from ..run.workers import CLUSTER_LOST, RESUME
from ..core.units import EXACT_DB, counted, pct, size_text, sqnr_text

def _generation_proof(r: Record, proof: str) -> str:
    """A language model's clause: what its proof and speed say, and what its tokenizer is."""
    generation = r.generation or {}  # the caller's row has one
    if r.status is Status.VERIFIED:
        from ..text.llm import describe

        proof = f"verified: {describe(generation)}"
    tokenizer = generation.get("tokenizer")
    if not tokenizer:
        return proof + "; no tokenizer shipped (none with the checkpoint: an app has nothing to encode text with)"
    return proof + (f"; {tokenizer['appNote']}" if tokenizer.get("appNote") else "")


def _compiler_and_calibration(r: Record) -> str:
    """A row's compiler estimates (Vela's) and what its quantization calibrated on."""
    text = f"; {estimate_text(r.estimates)}" if r.estimates else ""
    quantization = r.quantization or {}
    cal = quantization.get("calibration")
    if cal:
        real = f"{counted(cal['images'], 'real image')} ({cal.get('source', '').split(' (')[0]})" if cal.get("images") else \
            f"{counted(cal['files'], 'input file')} ({cal.get('source')})" if cal.get("files") else ""
        made = f"{cal['synthetic']} seeded synthetic {'token ids' if cal.get('tokenIds') else 'inputs'}" \
            if cal.get("synthetic") else ""
        text += f"; calibrated on {' + '.join(p for p in (real, made) if p)}"
        text += " (not representative: give real ids with --calibration DIR)" if cal.get("tokenIds") else ""
    elif quantization.get("activations"):
        text += f"; activations {quantization['activations']} (nothing calibrated)"
    share = quantization.get("operators") or {}
    if share.get("quantized", 0) < share.get("weighted", 0):
        text += (f"; {r.precision} on {share['quantized']} of its {share['weighted']} convolutions, linears and "
                 "matmuls (the rest fp32)")
    return text


def _spread(numbers) -> str:
    """p10–p90 of a timing, so a noisy figure looks noisy."""
    numbers = numbers or {}
    return f"{numbers['p10_ms']:.2f}–{numbers['p90_ms']:.2f}" if "p10_ms" in numbers and "p90_ms" in numbers else ""


def fit_table(console: Console, title: str, rows: list[dict], wrap=(), drop=()) -> Table:
    """A table of ``rows`` (column name → text) no wider than ``console``, words never
    broken: columns with no value are left out, then the columns of ``drop`` in order until
    its narrowest layout fits (the caption names them; ``--json`` has every field). Columns
    of ``wrap`` wrap between words; the others keep their text on one line."""
    columns = [c for c in (rows[0] if rows else {}) if any(r[c] for r in rows)]

    def least(c: str) -> int:
        texts = [c, *(r[c] for r in rows)]
        return max(cell_len(w) for t in texts for w in (t.split() if c in wrap else [t]) or [""])

    left_out = []
    for c in drop:
        if sum(least(k) + 3 for k in columns) + 1 <= console.width:
            break
        if c in columns:
            columns.remove(c)
            left_out.append(c)
    # widths of our own (rich's collapse can leave a table wider than the console): each
    # column its narrowest, and what is left shared by the wrapping ones as they need it
    most = {c: max(cell_len(t) for t in [c, *(r[c] for r in rows)]) for c in columns}
    room = console.width - 3 * len(columns) - 1
    width = {c: least(c) for c in columns}
    if sum(most.values()) > room:
        spare = max(room - sum(width.values()), 0)
        want = {c: most[c] - width[c] for c in columns if c in wrap}
        for c, more in want.items():
            width[c] += min(more, spare * more // max(sum(want.values()), 1))
    else:
        width = most
    table = Table(title=title, caption=f"left out to fit {console.width} columns: {', '.join(left_out)}" if left_out else None)
    for c in columns:
        table.add_column(c, no_wrap=c not in wrap, width=width[c])
    for r in rows:
        table.add_row(*(r[c] for c in columns))
    return table


def _group_by_reason(results) -> dict[str, list[str]]:
    """Files by the reason they were not run, each reason once."""
    grouped: dict[str, list[str]] = {}
    for r in results:
        grouped.setdefault(r.reason or "no reason given", []).append(Path(r.file).name)
    return grouped


# bench/export_throughput.json: mobilenet_v3_small's 12 default targets took 68 s on 2 cores
PACE_S, PACE_CORES = 68.3 / 12, 2


def estimate(jobs) -> str:
    """A rough time for a run's jobs (``plan``), from the measured pace of a small vision
    model, said to be rough; cached jobs take no time."""
    count = sum(len(targets) - held for m, targets, held in jobs if m.task != "text-generation")
    llms = [m.name for m, _, _ in jobs if m.task == "text-generation"]
    seconds = count * PACE_S * PACE_CORES / max(min(os.cpu_count() or 1, 8), 1)
    when = f"{5 * math.ceil(seconds / 5)} s" if seconds < 90 else f"{round(seconds / 60)} min"
    text = (f"about {when} for {count} vision job(s) at {PACE_S:.1f} s a job on {PACE_CORES} cores "
            "(mobilenet_v3_small's pace; bigger models take longer, cached jobs no time)") if count else ""
    if llms:
        text += ("; " if text else "") + f"language models ({', '.join(llms)}): minutes per target, not estimated"
    return text or "nothing to do"


def _arm64_text(r: Record) -> str:
    """export --prove-on arm64: the verdict on Arm64 under emulation, beside this host's; said
    with its numbers where it differs from the host's (another status, or outputs not the same)."""
    a = r.arm64
    if not a:
        return ""
    if a["status"] in (Status.NOT_RUNNABLE_HERE.value, Status.RUN_FAILED.value, Status.LOAD_FAILED.value):
        return f"; Arm64: {a['status']}: {a.get('reason')}" + (f" ({a['fix']})" if a.get("fix") else "")
    sqnr = sqnr_text(a["sqnr_db"]) if a.get("sqnr_db") is not None else "no SQNR"
    top1 = f", top-1 agreement {pct(a['top1_agreement'])}%" if a.get("top1_agreement") is not None else ""
    same = a.get("vs_host_sqnr_db")
    vs = (", the same outputs as this host" if same is not None and same >= EXACT_DB else
          f", {same:.1f} dB from this host's outputs" if same is not None else "")
    differs = a["status"] != r.status.value
    said = f"{a['status']} (this host: {r.status.value})" if differs else "also"
    method = a.get("method", "")
    where = f"under {method.split(' (')[1].split(',')[0]}" if "under emulation (" in method else "(this host, native)"
    return f"; Arm64 {where}: {said} {sqnr}{top1}{vs}" + (f": {a['reason']}" if a.get("reason") else "")


def _held_back(r: Record) -> str:
    """Why a written row is not offered to the app, as a clause ("" when it is): no build of
    the app loads its backend, or it is below its accuracy budget."""
    registry = default_registry()
    if r.status.ok and r.backends[0] in registry and not registry.get(r.backends[0]).app_platforms():
        return "; not offered to the app (no build of it links this backend: manifest notForApp)"
    unlinked = app_unlinked(r.artifact.delegation.kernels, r.task) if r.status.ok and r.artifact else None
    if unlinked:
        return f"; not offered to the app: {unlinked} (manifest notForApp)"
    if r.status is Status.OUT_OF_BUDGET:
        return "; not offered to the app (below its budget: manifest outOfBudget; --offer-out-of-budget offers it)"
    return ""


def _kind(spec) -> str:
    """What a model is, in the summary's heading: a catalog model's family and task; one's
    own by its task, and the app's list that shows it."""
    if spec.source == "catalog" or spec.family in ("custom", spec.task):
        return f"{spec.family}, {spec.task}"
    return f"{spec.task}, shown in the app's {spec.family} list"


def mark(status) -> str:
    """✓ only for a proven row (run here or on a reference simulator, matching eager, within
    its accuracy budget); ⚠ for one that ran and matched but misses its budget; ○ for one
    written but not proven (it needs a device, or was not verified); ✗ for a failure."""
    status = Status(status)
    return "✓" if status.proven else "⚠" if status is Status.OUT_OF_BUDGET else "○" if status.ok else "✗"


class Reporter:
    """Progress for every long stage: a live spinner on a terminal, one line per stage otherwise."""

    def __init__(self, console: Console):
        self.console = console
        self.status: RichStatus | None = None  # the spinner, on a terminal (UI.progress)
        self.t0 = time.perf_counter()
        self.prefixes: dict[str, str] = {}  # model -> "[i/n] model" (jobs of several models interleave)

    def _show(self, text: str) -> None:
        if self.status is not None:
            self.status.update(Text(text))  # as written: a spinner reads markup and emoji codes in a str
        else:
            elapsed = time.perf_counter() - self.t0
            self.console.print(f"[dim]{elapsed:7.1f}s[/dim] {escape(text)}", markup=True)

    def model_started(self, spec, index, total):
        self.prefixes[spec.name] = f"[{index}/{total}] {spec.name}"

    def stage(self, model, target, stage, step: str = ""):
        prefix = self.prefixes.get(model, model)
        where = f"{prefix} › {target}" if target else prefix
        self._show(f"{where}: {Stage(stage).words}{f' ({step})' if step else ''}…")

    step = stage  # how far a long stage is: "verifying ... (input 4 of 9)…"

    def record(self, record: Record):
        self.console.print(f"  {mark(record.status)} {record.model} {record.target}: {record.status.value}", highlight=False)


    def file_done(self, result) -> None:
        status = Status(result.status)
        why = f" — {result.reason}" if result.reason else ""
        self.console.print(f"  {mark(status)} {result.file}: {status.value}{why}", highlight=False)


def _console(**kw) -> Console:
    # What we print holds the user's names, paths and the libraries' messages: no markup
    # ("[tool.pteforge]" would vanish, "[/x]" raise) and no emoji codes (":x:" in
    # "model.py:x: ..." became ❌) unless a line asks for markup and escapes its text.
    # Tables take the terminal's width (COLUMNS, or 80 when piped) and wrap between words.
    return Console(highlight=False, soft_wrap=True, markup=False, emoji=False, **kw)


class Renderer:
    """What a command prints. ``quiet``: errors and the command's final line only;
    ``verbose``: every stage, one line each, and the libraries' warnings; ``json``: one JSON
    document on stdout (``document``), everything else on stderr or nowhere."""

    def __init__(self, quiet: bool = False, verbose: bool = False, json: bool = False):
        self.quiet, self.verbose, self.json = quiet, verbose, json
        self.stdout = _console()
        self.out = _console(file=io.StringIO()) if quiet or json else self.stdout
        self.err = _console(stderr=True)
        self.accuracy_report = False  # export --accuracy-report: every quantized row's worst layers

    def final(self, line: str, failed: Sequence[str] = ()) -> None:
        """The command's last line: printed as part of its output, and with -q after one
        line per file that failed, mismatched or missed its accuracy budget (``failed``)."""
        if self.quiet and not self.json:
            for text in failed:
                self.stdout.print(text)
            self.stdout.print(line)

    def document(self, data) -> None:
        """``--json``: the command's one JSON document on stdout."""
        if self.json:
            sys.stdout.write(json_text(data, indent=2, default=str) + "\n")

    def error(self, line: str) -> None:
        self.err.print(f"[bold red]error:[/bold red] {escape(line)}", markup=True)

    def warn(self, line: str) -> None:
        if not self.quiet:
            self.err.print(f"[bold yellow]warning:[/bold yellow] {escape(line)}", markup=True)

    def note(self, line: str) -> None:
        if not self.quiet:
            self.err.print(f"[dim]{escape(line)}[/dim]", markup=True)

    def traceback(self) -> None:
        self.err.print_exception(show_locals=False)

    @contextlib.contextmanager
    def progress(self):
        reporter = Reporter(_console(file=io.StringIO()) if self.quiet else self.err)
        if self.err.is_terminal and not self.quiet and not self.verbose:
            with self.err.status("starting…") as status:
                reporter.status = status
                yield reporter
        else:
            yield reporter

    def unavailable(self, plan, headline: str = "Unavailable backends from requested") -> None:
        """The seed's lines: what was requested and cannot lower, what can, and each fix
        (with -q, the final lines name each one requested, with its fix)."""
        if self.quiet:
            return
        self.err.print(f"⚠️  {headline}: {[u.target for u in plan.unavailable]}")
        self.err.print(f"   Available backends: {plan.available_names}")
        for u in plan.unavailable:
            self.err.print(f"   • {u.target}: {u.check.reason}" + (f" — fix: {u.check.fix}" if u.check.fix else ""))

    def plan(self, jobs, plan, config) -> dict:
        """``--dry-run``: the run's jobs, (model, its targets, how many the cache holds) as
        ``export`` makes them, and nothing done."""
        models, count = [spec for spec, _, _ in jobs], sum(len(targets) for _, targets, _ in jobs)
        cached = sum(held for _, _, held in jobs)
        self.out.print(f"Plan: {len(models)} model(s), {count} job(s)" + (f" ({cached} from the cache)" if cached else "")
                       + f", into {config.out_dir}")
        for m, targets, _ in jobs:
            shape = ", ".join("x".join(map(str, i.shape)) for i in m.inputs)
            names = [t.name + (" (fp32 reference)" if t.name in plan.references else "") for t in targets]
            self.out.print(f"   • {m.name} ({m.family}, {m.task}, input {shape}) from {m.source_ref}: "
                           f"{len(targets)} target(s): {', '.join(names) or 'none'}", highlight=False)
        downloads = [m.name for m in models if config.weights == WEIGHTS_PRETRAINED and m.source == "catalog"]
        self.out.print(f"   downloads: pretrained weights of {', '.join(downloads)} (--weights none: none)" if downloads
                       else "   downloads: nothing")
        self.out.print(f"   time: {estimate(jobs)}")
        return {"plan": {"out": str(config.out_dir), "jobs": count, "cached": cached, "models": [
            {"name": m.name, "task": m.task, "source": m.source_ref, "targets": [t.name for t in targets], "cached": held}
            for m, targets, held in jobs]}}

    def dry_run(self) -> None:
        self.out.print("dry run: nothing was written")

    def no_backend(self, exc) -> None:
        plan = exc.plan
        self.error(f"No available backends from requested: {[u.target for u in plan.unavailable]}")
        self.err.print(f"   Available backends: {plan.available_names}")
        for u in plan.unavailable:
            self.err.print(f"   • {u.target}: {u.check.reason}" + (f" — fix: {u.check.fix}" if u.check.fix else ""))

    def summary(self, result, models) -> None:
        by_model: dict[str, list[Record]] = {}
        for r in result.records:
            by_model.setdefault(r.model, []).append(r)
        references = set(result.references)
        for spec in models:
            asked = set(spec.targets) if spec.targets is not None else None  # a [[model]] table's own
            rows = [r for r in by_model.get(spec.name, [])  # what was asked for
                    if (r.target in asked if asked is not None else r.target not in references)]
            extra = [r for r in by_model.get(spec.name, []) if r not in rows]
            requested = len(rows) + len(result.unavailable)
            good = [r for r in rows if r.status.ok]
            bad = [r for r in rows if not r.status.ok]
            self.out.print(f"\n[bold]{escape(spec.name)}[/bold] ({escape(_kind(spec))})", markup=True)
            if good:
                glyph = "✅" if all(r.status.proven for r in good) else "○"
                self.out.print(f"{glyph} Successfully exported {len(good)}/{requested} backends: {proof_counts(rows)}")
            else:
                self.out.print(f"❌ Exported 0/{requested} backends")
            # proven first, then those that need a device, then those below their budget
            for r in sorted(good, key=lambda r: (r.status is Status.OUT_OF_BUDGET, not r.status.proven)):
                self.out.print(f"   {mark(r.status) if r.status is Status.OUT_OF_BUDGET else '•'} {self._artifact_line(r)}")
                self._accuracy(r)
            if spec.family == "custom" and good:
                self.out.print("   ℹ the executorch_flutter app does not show category custom: give --task (classification, "
                               "detection, pose, face, segmentation) and --labels-file to show it there", highlight=False)
            for r in extra:  # not asked for: what a reduced precision above is measured against
                line = self._artifact_line(r) if r.status.ok else f"{r.target}: {r.status.value}: {r.reason}"
                self.out.print(f"   ↳ fp32 reference, not asked for: {line}")
            failed = len(bad) + len(result.unavailable)
            if failed:
                self.out.print(f"⚠️  Failed {failed} backend(s):")
                for r in bad:
                    made = f" ({self._artifact_line(r)})" if r.artifact else ""
                    fix = f" — fix: {r.fix}" if r.fix else ""
                    self.out.print(f"   • {r.target}: {r.status.value}: {r.reason}{made}{fix}")
                    self._accuracy(r)
                for u in result.unavailable:
                    self.out.print(f"   • {u.target}: UNAVAILABLE: {u.check.reason}")
            for c in result.choices:
                if c["model"] == spec.name:
                    winner = c["winner"] or "none"
                    self.out.print(f"🎯 precision auto, {c['backend']}: {winner} — {c['why']}", highlight=False)
        if result.manifest_path:
            self.out.print(f"\nManifest: {result.manifest_path}")
        elif result.records:
            self.out.print("\nNo manifest written: no target produced an artifact (the reasons are above)")
        if result.log and any(not r.status.ok for r in result.records):
            self.out.print(f"What libraries printed in this run (warnings, native logs): {result.log}")

        lost = [r for r in result.records if r.reason and r.reason.startswith(CLUSTER_LOST)]
        if lost:
            self.out.print(f"{CLUSTER_LOST[0].upper()}{CLUSTER_LOST[1:]} {len(lost)} unfinished row(s): {RESUME}")

    def _accuracy(self, r: Record) -> None:
        """Under a row that misses its accuracy budget, why and where it breaks; with
        --accuracy-report, the layers that lose most, for every quantized row."""
        missed = r.verification.budget_missed if r.verification else None
        if missed:
            where = f": {accuracy_text(r.accuracy)}" if r.accuracy else ""
            self.out.print(f"     ↳ misses its accuracy budget ({missed}){where}", highlight=False)
        if self.accuracy_report and r.accuracy and r.accuracy.get("worst"):
            table = Table(title=f"{r.model} {r.target}: the layers that lose most against fp32 (on {r.accuracy['on']})")
            for col in ("eager module", "type", "operator", "SQNR after it (dB)", "lost there (dB)"):
                table.add_column(col, overflow="fold")
            for w in r.accuracy["worst"]:
                table.add_row(w["module"], w["type"], w["op"], f"{w['sqnr_db']:.1f}",
                              "from exact inputs" if w.get("from_exact") else f"{w['drop_db']:.1f}")
            self.out.print(table)
            for tip in r.accuracy.get("try", []):
                self.out.print(f"       try: {tip}", highlight=False)

    @staticmethod
    def _artifact_line(r: Record) -> str:
        if r.artifact is None:
            return f"{r.target}: {r.status.value}"
        d = r.artifact.delegation
        sqnr = f": {sqnr_text(r.verification.sqnr_db)}" if r.verification and r.verification.sqnr_db is not None else ""
        proof = {
            Status.VERIFIED: f"verified{sqnr}",
            Status.SIMULATED: f"simulated on {r.verification.simulator if r.verification else 'a simulator'}{sqnr}",
            Status.NOT_RUNNABLE_HERE: f"needs a device: {r.reason}" + (f" ({r.fix})" if r.fix else ""),
            Status.NOT_VERIFIED: "not verified",
            Status.MISMATCH: "MISMATCH",
            Status.OUT_OF_BUDGET: f"OUT_OF_BUDGET (ran {'on ' + r.verification.simulator if r.verification and r.verification.simulator else 'here'}{sqnr})",
        }.get(r.status, r.status.value)
        ran = r.status.proven or r.status is Status.OUT_OF_BUDGET
        if r.verification and r.verification.top1_agreement is not None and ran:
            proof += f", top-1 agreement {pct(r.verification.top1_agreement)}%"
        if r.verification and r.verification.integer_agreement is not None and ran:
            proof += f", integer outputs equal to eager's in {pct(r.verification.integer_agreement)}% of values"
        if r.verification and r.verification.runtime_precision not in (None, r.precision):
            proof += f", ran in {r.verification.runtime_precision}"
        if r.verification and r.verification.images and ran:
            im = r.verification.images
            top1 = f", top-1 {pct(im['top1_agreement'])}%" if im.get("top1_agreement") is not None else ""
            if not top1 and im.get("agreement") is not None:
                top1 = f", agreement {pct(im['agreement'])}%"
            proof += f"; on {im['images']} photos {sqnr_text(im['sqnr_db'])}{top1}"
        if r.generation is not None:
            proof = _generation_proof(r, proof)
        if r.latency and r.latency.get("p50_ms") is not None:
            proof += f"; p50 {r.latency['p50_ms']:.3g} ms ({r.latency.get('runs')} runs after warm-up)"
        elif r.latency and r.latency.get("skipped") and r.status is Status.VERIFIED:
            proof += f"; not timed: {r.latency['skipped']}"
        proof += _compiler_and_calibration(r)
        if r.cache:
            proof += f" (from the cache: made {r.cache['created'][:19].replace('T', ' ')} UTC in {r.cache['original_seconds']:.0f} s)"
        if r.same_program_as:
            proof += f" (the same program as {r.same_program_as}'s, lowered once)"
        if d.decomposed_instead:
            proof += f"; {', '.join(d.decomposed_instead)} decomposed (lowering it whole failed upstream)"
        for part in d.left_out:
            proof += (f"; {len(part['nodes'])} node(s) left to the portable kernels ({', '.join(part['nodes'][:3])}"
                      f"{', …' if len(part['nodes']) > 3 else ''}): {part['partitioner']} crashed on them: {part['error']}")
        if r.relative:
            rel = f"{r.relative['size']:.2f}× size"
            if "latency" in r.relative:
                rel += f", {r.relative['latency']:.2f}× latency"
                if r.relative["latency"] > 1.0:
                    rel += f" (slower than {r.relative['fp32']} on this host)"
            proof += f"; vs fp32{'' if 'fp32' in r.relative else ' weights'}: {rel}"
        if r.verification and r.verification.warning:
            proof += f"; warning: {r.verification.warning}"
        if r.caution:
            proof += f"; caution: {r.caution}"
        proof += _held_back(r) + _arm64_text(r)
        return (
            f"{r.target}: {Path(r.artifact.path).name} ({size_text(r.artifact.size)}, "
            f"{pct(d.percent / 100)} % delegated) — {proof}"
        )

    def backends_table(self, rows, on: str | None = None) -> None:
        registry = default_registry()
        where = f"on {on}" if on else "here"
        title = "ExecuTorch backends" + (f" on a {on} host (its ExecuTorch wheel's recorded runtime)" if on else "")
        cells = []
        for a in rows:
            b = registry.get(a.name)
            cells.append({
                "backend": a.name, "platforms": ", ".join(b.platforms), "hardware": b.hardware,
                "precisions": ", ".join(f"{p.value}*" if p is b.default_precision else p.value for p in b.precisions),
                f"lowers {where}": "✓" if a.lower.ok else f"✗ {a.lower.reason}" + (f" — {a.lower.fix}" if a.lower.fix else ""),
                f"runs {where}": "✓" if a.run.ok else f"✗ {a.run.reason}",
            })
        self.out.print(fit_table(self.out, title, cells, wrap=("platforms", "hardware", "precisions", f"lowers {where}",
                                                              f"runs {where}"), drop=("hardware", "precisions", "platforms")))
        self.out.print("* default precision")

    def models_table(self, specs) -> None:
        rows = [{"model": s.name, "category": s.family, "task": s.task, "input": "x".join(map(str, s.inputs[0].shape)),
                 "outputs": family(s.family).outputs, "labels": s.labels or ""} for s in specs]
        self.out.print(fit_table(self.out, "Model catalog", rows, wrap=("outputs",), drop=("labels", "outputs", "category")))

    def validation_table(self, results, report_path) -> None:
        rows = []
        device = [r for r in results if Status(r.status) is Status.NOT_RUNNABLE_HERE]
        # run ones first (proven, then failed); those that need a device fold into a line per reason
        for r in sorted((r for r in results if r not in device), key=lambda r: not Status(r.status).proven):
            times = [i.inference_ms for i in r.images if i.inference_ms is not None]
            first = r.images[0] if r.images else None
            what = ""
            if first and first.results and "prob" in first.results[0]:
                what = f"{first.image}: {first.results[0].get('name', first.results[0]['class'])}"
            elif first and first.results is not None:
                kinds = [k for k in ("keypoints", "mask_area") if first.results and k in first.results[0]]
                what = f"{first.image}: {len(first.results)} found" + (f" ({', '.join(kinds)})" if kinds else "")
            rows.append({
                "file": Path(r.file).name,
                "status": Status(r.status).value + (f": {r.reason}" if r.reason and r.status != Status.VERIFIED else ""),
                "delegates": ", ".join(sorted(set(r.delegates))) or ("?" if r.status is Status.LOAD_FAILED else "portable"),
                "agreement": f"{pct(r.agreement)}%" if r.agreement is not None else "",
                "photos SQNR dB": f"{r.sqnr_db:.1f}" if r.sqnr_db is not None and r.images and r.images[0].results is not None
                else "",
                "export's inputs SQNR dB": f"{r.seeded_sqnr_db:.1f}" if getattr(r, "seeded_sqnr_db", None) is not None else "",
                "ms/image": f"{sum(times) / len(times):.1f}" if times else "", "on the first photo": what,
            })
        if rows:
            self.out.print(fit_table(self.out, "Validation on real images", rows, wrap=("status", "delegates", "on the first photo"),
                                  drop=("on the first photo", "delegates", "ms/image", "export's inputs SQNR dB")))
        for reason, files in _group_by_reason(device).items():
            self.out.print(f"not run here ({len(files)}): {', '.join(files)}: {reason}")
        self.out.print(proof_counts(results))
        self.out.print(f"Report: {report_path}")

    def selection(self, sel) -> None:
        where = (f"a device of platform {sel.platform} (its own delegates; not loaded here)" if sel.device else
                 f"this host ({sel.platform or 'its platform'}'s order, loaded here)")
        self.out.print(f"for {where}: try {', '.join(sel.order) or 'nothing'}")
        for name, why in sel.skipped:
            self.out.print(f"skip {name}: {why}")
        if sel.entry:
            self.out.print(f"→ {sel.entry.name} ({sel.entry.target}, {sel.entry.status}) for {sel.model}: {sel.path}")
        else:
            self.out.print(f"✗ no artifact of {sel.model} for {where}")

    def bench_table(self, results) -> None:
        # measured rows first, then failures; those not runnable here fold into a line per reason
        device = [r for r in results if r.status is Status.NOT_RUNNABLE_HERE]
        shown_rows = sorted((r for r in results if r not in device), key=lambda r: r.status is not None)

        def cells(r) -> dict[str, str]:
            n, eager, ort = r.numbers, (r.eager or {}).get("p50_ms"), (r.onnxruntime or {}).get("p50_ms")
            return {
                "file": Path(r.file).name,
                "load": f"{n['load_ms']:.2f}" if "load_ms" in n else "",
                "1st run": f"{n['first_run_ms']:.2f}" if "first_run_ms" in n else "",
                "p50": f"{n['p50_ms']:.2f}" if "p50_ms" in n else "", "p10–p90": _spread(n),
                "RSS MB": f"{n['peak_rss_mb']:.1f}" if "peak_rss_mb" in n else "", "threads": str(n.get("threads", "")),
                "eager p50": f"{eager:.2f}" if eager else "",
                "vs eager": f"{n['p50_ms'] / eager:.2f}×" if eager and n.get("p50_ms") else "",
                "ORT p50": f"{ort:.2f}" if ort else "",
            }

        rows = [cells(r) for r in shown_rows if r.status is None]
        table = fit_table(self.out, "Benchmark on this host (ms)", rows,
                       drop=("threads", "1st run", "RSS MB", "load", "p10–p90", "vs eager"))
        if rows:
            self.out.print(table)
        for of in sorted({o for r in shown_rows if (o := (r.onnxruntime or {}).get("of")) is not None}):  # an ONNX file's own
            self.out.print(f"ORT p50 of {', '.join(Path(r.file).name for r in shown_rows if (r.onnxruntime or {}).get('of') == of)}: "
                           f"ONNX Runtime on {of}; eager p50: its PyTorch import")
        for r in shown_rows:
            if r.status is not None:
                self.out.print(f"✗ {Path(r.file).name}: {r.status.value}: {r.reason}")
        for reason, files in _group_by_reason(device).items():
            self.out.print(f"not run here ({len(files)}): {', '.join(files)}: {reason}")
        measured, simulated = sum(r.status is None for r in results), sum(r.simulated for r in results)
        need_device = sum(r.status is Status.NOT_RUNNABLE_HERE and not r.simulated for r in results)
        self.out.print(f"{measured} timed on this host; {simulated} proven on reference simulators at export, which time "
                       f"nothing; {need_device} need a device")
        recorded = sorted({str(r.recorded_in) for r in results if r.recorded_in})
        if recorded:
            self.out.print(f"updated the bench numbers of {sum(r.recorded_in is not None for r in results)} entries in "
                           f"{', '.join(recorded)} (each entry's `bench`, replacing the export's) and regenerated the reports")
