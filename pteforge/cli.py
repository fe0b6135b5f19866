"""The command line: parse, call the API, render, map errors to exit codes.

Kept light: importing this module imports neither torch nor ExecuTorch, so
``--help`` answers at once; the API (and the run engine under it), the renderer and the
config file's reader are imported by the commands that use them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .app.platforms import PLATFORMS, describe
from .backends import default_registry
from .backends.base import APP_PLATFORMS
from .core import options  # read at call time: tests add an option
from .core.errors import (
    EXIT_MEANINGS,
    ExitStatus,
    ModelError,
    NoBackendError,
    PteforgeError,
    UsageError,
    one_line,
)
from .core.fallback import DESKTOP_OS
from .core.io import write_atomic
from .core.limits import ENV_GB
from .core.request import ExportRequest
from .core.result import Status, proof_counts
from .core.quiet import quiet_libraries
from .core.spec import ExportConfig
from .core.system import os_name
from .families import families
from .runtime.host import host
from .ui.argv import Parser, unknown_command, unrecognised

GLOBAL = ("--debug", "-q", "--quiet", "-v", "--verbose", "--json")
COMMANDS = ("export", "validate", "bench", "select", "manifest", "publish", "backends", "models", "docs", "cache",
            "setup")


def _make_common(default) -> Parser:
    """The options of every command. A command's own subcommands (``manifest check``) take
    them too, with ``default`` SUPPRESS so that they do not undo one given before them."""
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=default, help="show tracebacks")
    said = common.add_mutually_exclusive_group()
    said.add_argument("-q", "--quiet", action="store_true", default=default, help="print only errors and the final line")
    said.add_argument("-v", "--verbose", action="store_true", default=default,
                      help="print every stage on its own line, and the libraries' warnings and logs")
    said.add_argument("--json", action="store_true", default=default,
                      help="print one JSON document on stdout, with the same fields as the files; progress and "
                           "errors go to stderr")
    return common


def _build_parser() -> Parser:
    parser = Parser(
        prog="pteforge",
        description="Turn PyTorch models into ExecuTorch programs (.pte) for every backend, and prove each one works.",
        epilog="With no command, exports every catalog model with every backend that can lower here.",
    )
    parser.add_argument("--version", action="version", version=f"pteforge {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command")
    common, inner = _make_common(False), _make_common(argparse.SUPPRESS)

    ex = sub.add_parser("export", parents=[common], help="export models to .pte, one per target (default command)")
    ex.add_argument("-c", "--config", default=None, metavar="FILE",
                    help="read the export's options from a pteforge.toml, or [tool.pteforge] of a pyproject.toml; "
                         "flags override the file. Without -c: the nearest pteforge.toml, or pyproject.toml "
                         "with [tool.pteforge], from here up to the project's root")
    ex.add_argument("--no-config", action="store_true", help="read no config file, not even one found here")
    _add_export_options(ex)
    _add_inspection_commands(sub, common)
    _add_file_commands(sub, common, inner)
    parser.export_parser = ex  # -c FILE sets its defaults
    return parser


def _add_export_options(ex) -> None:
    """The export's flags, from their one declaration each (``options.py``); each task
    family's flag leads the models (``--mobilenet``, ``--yolo``, ...)."""
    groups = {key: ex.add_argument_group(title) for key, title in options.GROUPS.items()}
    for fam in families():
        if fam.models:
            groups["models"].add_argument(f"--{fam.word}", nargs="*", metavar="NAME", dest=fam.word.replace("-", "_"),
                                          help=f"{fam.model_help} [category {fam.category}]")
    registries = _registry_words()
    for o in options.OPTIONS:
        if not o.flags:
            continue
        kw: dict[str, Any] = {"dest": o.name, "help": o.help.format(**registries)}
        if o.kind in ("flag", "off"):
            kw.update(action="store_true" if o.kind == "flag" else "store_false")
            if o.kind == "flag" and o.default is not False:
                kw["default"] = o.default
        else:
            kw.update(default=[] if o.kind == "append" else o.default, metavar=o.metavar,
                      choices=registries[o.choices] if isinstance(o.choices, str) else o.choices)
            kw.update({"append": {"action": "append"}, "list": {"nargs": "+"}}.get(o.kind, {}))
            if o.type is not None:
                kw["type"] = o.type
        groups[o.group].add_argument(*o.flags, **kw)


def _registry_words() -> dict:
    """What the options' help and choices name from the registries (``options.py``)."""
    return {"backends": ", ".join(default_registry().names()), "platforms": describe(),
            "labels_files": ", ".join(sorted({f.labels_file for f in families() if f.labels_file})),
            "task_categories": ", ".join(f.category for f in families() if f.preprocessing is not None),
            "platform_names": [*PLATFORMS, "all"]}


def _add_inspection_commands(sub, common) -> None:
    """validate, bench and select: what an export's artifacts do."""
    va = sub.add_parser("validate", parents=[common], help="run every artifact on real images and compare with eager PyTorch")
    va.add_argument("dir", nargs="?", default=None, metavar="DIR", help="the same as --models-dir DIR (as pteforge bench DIR)")
    va.add_argument("--models-dir", default=None, metavar="DIR", help="where the artifacts and index.json are (default: models)")
    va.add_argument("--images-dir", default=None, metavar="DIR",
                    help="images to run (default: the photos our dependencies ship: Ultralytics' bus.jpg and zidane.jpg, "
                         "Matplotlib's grace_hopper.jpg, scikit-learn's china.jpg and flower.jpg, those installed)")
    va.add_argument("--output-file", default=None, metavar="FILE",
                    help="JSON report (default: <models-dir>/validation_report.json; in a published site, which "
                         "validate only reads, the cache's validation/ folder)")
    va.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds per file before it is killed")
    va.add_argument("--draw", nargs="?", const="", default=None, metavar="DIR",
                    help="write every photo annotated with what each program found (boxes, keypoints, masks, top-5) "
                         "to DIR (default: <models-dir>/validation), linked from report.html")

    bn = sub.add_parser("bench", parents=[common], help="latency, load time, peak memory of every artifact that runs here")
    bn.add_argument("path", nargs="?", default="models", metavar="DIR|FILE", help="default: models")
    bn.add_argument("--runs", type=int, default=20, metavar="N", help="timed runs after warm-up (default 20)")
    bn.add_argument("--warmup", type=int, default=3, metavar="N", help="warm-up runs (default 3)")
    bn.add_argument("--compare", choices=["eager"], default=None, help="time eager PyTorch, and ONNX Runtime where it is installed (on the model's own file for an ONNX model), beside each artifact")

    se = sub.add_parser("select", parents=[common], help="which artifact a device of PLATFORM loads first (its fallback "
                        "order), or without --platform which one this host loads, with the fallbacks skipped")
    se.add_argument("names", nargs="+", metavar="[MANIFEST] MODEL",
                    help="the manifest (an index.json or its directory; default: models/index.json) and the model "
                         "(left out: the one model the manifest lists)")
    se.add_argument("--platform", default=None, choices=[*PLATFORMS, *DESKTOP_OS, "all"],
                    help="a device's platform: its order and its own delegates, nothing loaded here; macos, linux, "
                         "windows: a desktop of that OS, desktop's order over its artifacts (default: this host, its "
                         "OS's order, each file loaded; all: every platform's artifacts, here)")
    se.add_argument("--manifest", default=None, metavar="FILE", help="the manifest, as the first of two names")


def _add_file_commands(sub, common, inner) -> None:
    """manifest, publish, docs, backends, models and cache."""
    mf = sub.add_parser("manifest", parents=[common], help="check a manifest, or print its JSON Schema")
    mf_sub = mf.add_subparsers(dest="manifest_command", required=True)
    mc = mf_sub.add_parser("check", parents=[inner], help="validate FILE against pteforge's manifest schema")
    mc.add_argument("file", metavar="FILE")
    mf_sub.add_parser("schema", parents=[inner], help="print the manifest's JSON Schema")

    pb = sub.add_parser("publish", parents=[common],
                        help="lay out OUT as the executorch_flutter app fetches it: SITE/versions.json, SITE/<version>/index.json")
    pb.add_argument("out", metavar="OUT", help="an export's manifest: its index.json, or the directory holding it")
    pb.add_argument("--site", required=True, metavar="DIR", help="the directory a web server serves to the app")
    pb.add_argument("--runtime", "--version", dest="site_runtimes", nargs="+", default=None, metavar="V",
                    help="the ExecuTorch versions of the app runtimes to publish for, one directory each (default: "
                         "every one that loads the artifacts: for 1.5.1, 1.5.0 1.5.1 1.6.0)")
    pb.add_argument("--base-url", default=None, metavar="URL",
                    help="the URL SITE is served at: remoteUrl becomes URL/<version>/<file> (the app downloads it as "
                         "is); default: the baseUrl OUT's manifest records (export --base-url)")
    pb.add_argument("--relative", action="store_true",
                    help="publish without a base URL: remoteUrl stays relative, for an app given such URLs on purpose")

    dc = sub.add_parser("docs", parents=[common], help="write the generated docs pages: DIR/backends/<name>.md for every "
                                                       "backend, and DIR/cli.md, this reference")
    dc.add_argument("--out", default="docs", metavar="DIR", help="default: docs")

    bk = sub.add_parser("backends", parents=[common], help="which backends can lower and run here (or on another host OS)")
    bk.add_argument("--host", choices=("linux", "macos", "windows"), default=None,
                    help="answer for that host OS: what lowers there, and what its ExecuTorch wheel runs")
    sub.add_parser("models", parents=[common], help="the model catalog")
    ca = sub.add_parser("cache", parents=[common], help="the content-addressed artifact cache")
    ca_sub = ca.add_subparsers(dest="cache_command", required=True, metavar="{clear,info}")
    ca_sub.add_parser("clear", parents=[inner], help="remove every cached artifact")
    ca_sub.add_parser("info", parents=[inner], help="where the cache is, how many entries and bytes")
    st = sub.add_parser("setup", parents=[common], help="fetch what an optional proof needs into pteforge's cache")
    st_sub = st.add_subparsers(dest="setup_command", required=True, metavar="{arm64}")
    st_sub.add_parser("arm64", parents=[inner],
                      help="ExecuTorch's aarch64 runtime under qemu-user, for export --prove-on arm64: Debian's "
                           "qemu-user-static and arm64 CPython, the aarch64 wheels (~0.5 GB download, 1.8 GB on disk; "
                           "idempotent; Debian 12 x86_64, root once for dpkg --add-architecture arm64)")


def _apply_config(parser, given, argv: list[str]):
    """The command line again, with the config file's values as the export's defaults:
    a flag on the command line wins over the file (a repeated flag replaces its list)."""
    from .ui.config import load_config, locations, table_locations

    values = load_config(Path(given.config), {a.dest: list(a.choices) for a in parser.export_parser._actions if a.choices})
    if values.get("model"):  # its package.module:factory references, from a subdirectory too
        from .models.factory import import_from

        import_from(Path(given.config).parent)
    parser.export_parser.set_defaults(**values)
    args = parser.parse_args(_normalise_argv(argv))
    for dest in ("model", "input_shape", "input_dtype"):  # append flags: given ones replace the file's
        if getattr(given, dest):
            setattr(args, dest, getattr(given, dest))
    where = locations(Path(given.config))
    # the options the file set and no flag overrode: a later error about one names its line
    args.from_file = {dest: (where.get(dest, given.config), value) for dest, value in values.items()
                      if getattr(args, dest, None) == value}
    if "model" in args.from_file:  # each [[model]] table's keys too: an error about one names its line
        args.from_file.update(table_locations(Path(given.config), values))
    return args


def _locate(exc: PteforgeError, args) -> PteforgeError:
    """``exc`` naming the config file's line, when it is about one option the file set: its
    flag, or one of its values, is in the message (``unknown backend 'nosuch'``)."""
    text = str(exc)
    about = []
    for dest, (where, value) in getattr(args, "from_file", {}).items():
        flag = "--" + dest.replace("_", "-")
        words = [str(v) for v in (value if isinstance(value, list) else [value]) if not isinstance(v, bool)]
        if flag in text or any(len(w) > 1 and re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text) for w in words):
            about.append((dest, where))
    if len(about) != 1 or text.startswith(str(about[0][1])):
        return exc
    dest, where = about[0]
    located = type(exc)(f"{where}: {dest.replace('_', '-')}: {text}",
                        fix=exc.fix or ("use one of the names listed" if "Available: " in text else None))
    located.__cause__ = exc.__cause__
    return located


def _normalise_argv(argv: list[str]) -> list[str]:
    """``pteforge`` alone and ``pteforge --mobilenet`` mean ``pteforge export ...``."""
    if not argv:
        return ["export"]  # every everyday catalog model, or what a config file found here names
    if argv[0] in COMMANDS or argv[0] in ("-h", "--help", "--version"):
        return argv
    flags = 0  # options of every command, given before it: pteforge -q validate
    while flags < len(argv) and argv[flags] in GLOBAL:
        flags += 1
    if flags < len(argv) and argv[flags] in COMMANDS:
        return [argv[flags], *argv[:flags], *argv[flags + 1:]]
    if flags < len(argv) and not argv[flags].startswith("-"):  # export takes no bare word: a mistyped command
        raise unknown_command(argv[flags], COMMANDS)
    return ["export", *argv]


def _parse(parser, argv: list[str]):
    """The command line parsed; one that does not parse raises UsageError, one line
    (``ui.argv``: the closest option, value or command, no usage dump)."""
    args, extra = parser.parse_known_args(_normalise_argv(argv))
    if extra and args.command == "select" and not any(e.startswith("-") for e in extra):
        args.names += extra  # select's names around an option (`select models --platform ios m`): argparse takes the first only
    elif extra:
        raise unrecognised(parser, args, extra)
    return args


def _refuse(argv: list[str], exc: UsageError) -> int:
    """A command line that does not parse: its one line, and with --json its error document."""
    from .ui.render import Renderer

    ui = Renderer(quiet=bool({"-q", "--quiet"} & set(argv)), json="--json" in argv)
    return _fail(ui, exc.one_line(), exc.exit_status)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    try:
        args = _parse(parser, argv)
    except UsageError as exc:
        return _refuse(argv, exc)
    args.bare = not argv
    debug = bool(getattr(args, "debug", False)) or "--debug" in argv
    if not debug and not getattr(args, "verbose", False):
        quiet_libraries(torch_logs=True)  # library chatter (deprecations, INFO logs from partitioners) hides our progress
    from .ui.render import Renderer

    ui = Renderer(quiet=getattr(args, "quiet", False), verbose=getattr(args, "verbose", False),
                  json=getattr(args, "json", False))
    if ui.verbose:
        logging.basicConfig(level=logging.INFO)
    try:
        if args.command == "export" and args.config is None and not args.no_config:
            from .ui.config import discover

            found = discover(Path.cwd())
            if found is not None:
                ui.note(f"export options from {found} (flags override them; --no-config to ignore the file)")
                args.config = str(found)
        if getattr(args, "config", None):
            args = _apply_config(parser, args, argv)
        return _run(args, ui, debug)
    except NoBackendError as exc:
        if debug:
            ui.traceback()
        ui.no_backend(exc)
        return _fail(ui, str(exc), exc.exit_status, said=False)
    except PteforgeError as exc:
        if debug:
            ui.traceback()
        if isinstance(exc, (UsageError, ModelError)):  # a config file's option or [[model]] table: its line
            exc = _locate(exc, args)
        return _fail(ui, exc.one_line(), exc.exit_status)
    except KeyboardInterrupt:
        return _fail(ui, "interrupted: artifacts and the manifest hold what finished before Ctrl-C", ExitStatus.INTERRUPTED)
    except Exception as exc:  # a bug: one line unless --debug
        if debug:
            ui.traceback()
        return _fail(ui, f"internal error: {one_line(exc)} (run with --debug for the traceback)", ExitStatus.INTERNAL)


def _fail(ui, line: str, status, said: bool = True) -> int:
    """A command that failed: its one line on stderr (unless ``said``: already printed),
    and with --json the same as a document."""
    if said:
        ui.error(line)
    ui.document({"error": line, "exitCode": int(status)})
    return int(status)


def _run(args, ui, debug: bool) -> int:
    commands = {
        "backends": _cmd_backends, "models": lambda a, u: _cmd_models(u), "validate": _cmd_validate,
        "docs": _cmd_docs, "select": _cmd_select, "bench": _cmd_bench, "manifest": _cmd_manifest,
        "cache": _cmd_cache, "publish": _cmd_publish, "setup": _cmd_setup,
    }
    if args.command in commands:
        return commands[args.command](args, ui)
    return _cmd_export(args, ui, debug)


def _cmd_docs(args, ui) -> int:
    from .ui.docs import write_docs

    written = [*write_docs(Path(args.out) / "backends", host()), Path(args.out) / "cli.md"]
    write_atomic(written[-1], make_cli_reference())
    for path in written:
        ui.out.print(f"wrote {path}")
    ui.final(f"wrote {len(written)} page(s) under {args.out}")
    ui.document({"out": str(args.out), "wrote": [str(path) for path in written]})
    return int(ExitStatus.OK)


def make_cli_reference() -> str:
    """The CLI reference page: every command's help, from the parser itself (so it cannot go
    stale; ``tests/test_docs.py`` checks the committed page is this)."""
    parser = _build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]

    def text(p: argparse.ArgumentParser) -> str:
        p.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100, max_help_position=32)
        return p.format_help().rstrip()

    lines = ["# CLI reference", "", "Generated from the parser by `pteforge docs`; `pteforge COMMAND --help` prints the same.",
             "", "```text", text(parser), "```", ""]
    for name, sub in commands.choices.items():
        lines += [f"## `pteforge {name}`", "", "```text", text(sub), "```", ""]
    return "\n".join(lines + _make_option_table() + _make_exit_table())


def _make_exit_table() -> list[str]:
    """The exit codes, from ``ExitStatus`` and their meanings (``core.errors.EXIT_MEANINGS``)."""
    return ["## Exit codes", "", "Every command's, from `pteforge/core/errors.py`. Every failure is one line naming "
            "the cause and the fix; `--debug` adds the traceback.", "", "| code | meaning |", "|---|---|",
            *(f"| {int(code)} | {meaning} |" for code, meaning in EXIT_MEANINGS.items()), ""]


def _make_option_table() -> list[str]:
    """The export options' config-file keys and roles, from their declarations."""
    roles = {options.ARTIFACT: "artifact: in its cache key", options.RUN: "run: how this run runs, not in a cache key",
             "request": "request: what to export"}
    lines = ["## Export options in a config file", "",
             "Each export option is declared once (`pteforge/core/options.py`): its flag, its key in a config file "
             "([The config file](config.md)), and its role. An artifact option is part of every artifact's cache key.",
             "", "| flag | config-file key | role |", "|---|---|---|"]
    for o in options.OPTIONS:
        if o.flags:
            key = ", ".join(f"`{k.replace('_', '-')}`" for k in (o.name, *o.aliases)) if o.file else "(flag only)"
            lines.append(f"| `{' '.join(o.flags)}` | {key} | {roles[o.role]} |")
    return lines + [""]


def _cmd_export(args, ui, debug: bool) -> int:
    from .api import (
        TargetPlan,
        ask_host_early,
        check_before_work,
        check_surroundings,
        export,
        planned_jobs,
        resolve_request,
    )

    if args.archive_limit_gb is not None:  # read wherever a file is judged, workers included
        if not args.archive_limit_gb > 0:
            raise UsageError(f"--archive-limit-gb {args.archive_limit_gb:g} is not a positive number of GiB",
                             fix="give e.g. --archive-limit-gb 16")
        os.environ[ENV_GB] = str(args.archive_limit_gb)
    request = ExportRequest.from_options(vars(args), _family_words())
    if not request.dry_run and vars(args).get("executor", "local") == "local":
        ask_host_early(quiet=not debug)  # a machine's first run: the fork server's imports answer it
    job = resolve_request(request)
    for note in job.notes:
        ui.warn(note)
    if job.plan and job.plan.unavailable:
        ui.unavailable(job.plan)
    ui.accuracy_report = request.accuracy_report
    config = ExportConfig.from_options(vars(args), debug=debug)
    plan = job.plan or TargetPlan([])
    if request.dry_run or getattr(args, "bare", False):  # bare `pteforge` is the largest run: its plan first
        check_before_work(job.models, config, job.plan)
        said = ui.plan(planned_jobs(job.models, job.plan, config), plan, config)
        if request.dry_run:
            ui.dry_run()
            ui.document(said)
            return int(ExitStatus.OK)
    for note in check_surroundings(request, config.out_dir):
        ui.warn(note)
    with ui.progress() as reporter:
        result = export(job.models, plan, config, reporter, write_labels=request.labels)
    ui.summary(result, job.models)
    for gone in result.dropped:
        ui.warn(f"{gone}: its entry is no longer in {show_path(result.manifest_path)} (export its model again to list it)")
    _say_exported(ui, result, config)
    if request.publish and result.manifest_path:
        _publish(ui, config.out_dir, request.publish, request.publish_runtime, request.publish_base_url,
                 request.publish_relative)
    elif request.publish:
        ui.warn(f"nothing published to {request.publish}: the export wrote no manifest")
    return int(ExitStatus.OK if result.ok else ExitStatus.TARGETS_FAILED)


def _family_words() -> list[str]:
    """The destinations of the task families' flags (``--yolo-pose``: ``yolo_pose``)."""
    return [fam.word.replace("-", "_") for fam in families() if fam.models]


def _say_exported(ui, result, config) -> None:
    """The export's final line, and with --json its document: the manifest written
    (index.json) and the rows that failed (report.json's), as the files hold them."""
    from .report.manifest import MANIFEST_NAME
    from .ui.render import mark

    rows = [r for r in result.records if r.target not in result.references]
    good = [r for r in rows if r.status.ok]
    asked = len(rows) + len(result.unavailable)
    where = f"manifest {show_path(result.manifest_path)}" if result.manifest_path else "no manifest written"
    failed = [f"{mark(r.status)} {r.model} {r.target}: {r.status.value}: {r.reason}"
              + (f" ({show_path(r.artifact.path)})" if r.artifact else "") + (f" — fix: {r.fix}" if r.fix else "")
              for r in rows if not r.status.offered]
    failed += [f"✗ {u.target}: UNAVAILABLE: {u.check.reason}" + (f" — fix: {u.check.fix}" if u.check.fix else "")
               for u in result.unavailable if u.requested]
    failed += [f"✗ {r.model} {r.target}: on Arm64 under emulation {r.arm64['status']}: {r.arm64.get('reason')}"
               for r in rows if r.arm64_failed]
    ui.final(f"exported {len(good)}/{asked} target(s)" + (f": {proof_counts(good)}" if good else "") + f"; {where}",
             failed)
    if ui.json:  # the run's own failures: report.json is not written when no row wrote a file
        index = Path(config.out_dir) / MANIFEST_NAME
        ui.document({**(json.loads(index.read_text()) if result.manifest_path and index.is_file() else {}),
                     "lastRunFailures": result.failures})


def show_path(path) -> str:
    """A path as the user can type it from here: relative to the working directory when under it."""
    path = Path(path)
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except (OSError, ValueError):
        return str(path)


def _cmd_validate(args, ui) -> int:
    from .api import validate_dir
    from .ui.render import mark

    with ui.progress() as reporter:
        run = validate_dir(args.dir, args.models_dir, args.images_dir, args.timeout, args.draw, args.output_file,
                           on_file=reporter.file_done, warn=ui.warn)
    ui.validation_table(run.results, show_path(run.output))
    if run.report_html:
        ui.out.print(f"Report: {show_path(run.root / 'report.html')} (with this validation"
                     f"{' and its drawings' if args.draw is not None else ''})")
    if run.site is not None:
        ui.note(f"{show_path(run.root)} is in the published site {show_path(run.site)}, which validate only reads: report "
                f"{show_path(run.output)}" + (f", drawings under {show_path(run.drawn)}" if run.drawn else "")
                + ", nothing written into the site")
    failed = [f"{mark(r.status)} {r.file}: {Status(r.status).value}: {r.reason}" for r in run.results
              if not Status(r.status).offered]
    ui.final(f"validated {len(run.results)} file(s): {proof_counts(run.results) or 'none proven'}; report {show_path(run.output)}",
             failed)
    if ui.json:
        ui.document(json.loads(run.output.read_text()))
    return int(ExitStatus.OK if all(Status(r.status).ok for r in run.results) else ExitStatus.TARGETS_FAILED)


def _cmd_bench(args, ui) -> int:
    from .api import bench_files

    results = bench_files(args.path, args.runs, args.warmup, args.compare == "eager")
    ui.bench_table(results)
    timed = sum(r.status is None for r in results)
    failed = [f"✗ {Path(r.file).name}: {r.status.value}: {r.reason}" for r in results
              if r.status not in (None, Status.NOT_RUNNABLE_HERE)]
    ui.final(f"timed {timed} of {len(results)} file(s) on this host", failed)
    ui.document({"files": [_bench_entry(r) for r in results]})
    return int(ExitStatus.OK if all(r.status in (None, Status.NOT_RUNNABLE_HERE) for r in results) else ExitStatus.TARGETS_FAILED)


def _bench_entry(r) -> dict:
    """One file of ``bench --json``: its numbers as bench records them in the manifest."""
    return {"file": r.file, "status": "measured" if r.status is None else r.status.value, "reason": r.reason,
            **r.numbers, "eager": r.eager, "onnxruntime": r.onnxruntime, "simulated": r.simulated}


def _cmd_select(args, ui) -> int:
    from .api import select_best

    selection = select_best(args.names, args.manifest, args.platform)
    ui.selection(selection)
    ui.final(f"{selection.model}: {show_path(selection.path)}" if selection.entry else f"{selection.model}: none")
    ui.document({"model": selection.model, "platform": selection.platform, "device": selection.device,
                 "order": selection.order, "skipped": [{"backend": n, "why": w} for n, w in selection.skipped],
                 "selected": selection.entry.name if selection.entry else None,
                 "target": selection.entry.target if selection.entry else None,
                 "path": str(selection.path) if selection.entry else None})
    return int(ExitStatus.OK if selection.entry else ExitStatus.TARGETS_FAILED)


def _cmd_manifest(args, ui) -> int:
    from .api import check_manifest, manifest_schema

    if args.manifest_command == "schema":
        print(json.dumps(manifest_schema(), indent=2))
        return int(ExitStatus.OK)
    checked = check_manifest(args.file)
    manifest = checked.manifest
    line = (f"{show_path(checked.path)}: valid pteforge manifest (schema_version {manifest.schema_version}), read by the "
            f"executorch_flutter app (current and older parser): {len(manifest.models)} artifact(s) for the app, "
            f"{len(manifest.references)} reference(s), {len(manifest.outOfBudget)} out of budget, "
            f"{len(manifest.notForApp)} not loaded by the app on any platform, {len(manifest.failed)} failed")
    ui.out.print(line)
    for note in checked.notes:
        ui.out.print(f"  note: {note}")
    seen = _list_per_platform(manifest)
    for platform, names in seen.items():
        ui.out.print(f"  {platform} sees: {', '.join(names) or 'nothing'}")
    ui.final(line)
    ui.document({"file": str(checked.path), "valid": True, "schemaVersion": manifest.schema_version,
                 "artifacts": len(manifest.models), "references": len(manifest.references),
                 "outOfBudget": len(manifest.outOfBudget), "notForApp": len(manifest.notForApp),
                 "failed": len(manifest.failed), "notes": checked.notes, "perPlatform": seen})
    return int(ExitStatus.OK)


def _list_per_platform(manifest) -> dict[str, list[str]]:
    """What the app on each platform lists: the entries of ``models`` whose ``platforms``
    name it (an entry with none, as the app reads it, on every platform)."""
    return {p: [e.name for e in manifest.models if not e.platforms or p in e.platforms] for p in APP_PLATFORMS}


def _cmd_publish(args, ui) -> int:
    done = _publish(ui, Path(args.out), args.site, args.site_runtimes, args.base_url, args.relative)
    ui.document({"site": str(args.site), "manifest": str(done.manifest), "madeWith": done.made_with,
                 "runtimes": done.runtimes, "files": done.files, "baseUrl": done.base_url or "",
                 "baseUrlFrom": done.base_from, "versions": done.versions, "latest": done.latest,
                 "indexes": [str(Path(args.site) / v / "index.json") for v in done.runtimes]})
    return int(ExitStatus.OK)


def _publish(ui, out: Path, site: str, runtimes: list[str] | None, base_url: str | None, relative: bool | None):
    """Publish ``out`` (an export's index.json or its directory) into ``site``; what was published."""
    from .app.publish import publish

    done = publish(Path(out), Path(site), runtimes, base_url, bool(relative))
    line = (f"published {done.files} file(s) made with ExecuTorch {done.made_with} for the runtimes "
            f"{', '.join(done.runtimes)} (under {site}); versions.json: {', '.join(done.versions)} (latest {done.latest})")
    ui.out.print(line)
    ui.final(line)
    if done.base_url is None:
        ui.warn("--relative: remoteUrl entries are relative, and the executorch_flutter app downloads remoteUrl as it is")
    elif base_url is None:
        ui.note(f"remoteUrl under {done.base_url}/<version>/: the baseUrl {show_path(done.manifest)} records (its export's "
                "--base-url); give --base-url URL where the site is served elsewhere")
    return done


def _cmd_backends(args, ui) -> int:
    from .api import backend_plugin_errors, backends

    rows = backends(on=args.host)
    on = args.host if args.host not in (None, os_name()) else None
    ui.document([
        {"name": a.name, "host": args.host or os_name(), "lowers_here": a.lower.ok, "lower_reason": a.lower.reason,
         "lower_fix": a.lower.fix, "runs_here": a.run.ok, "run_reason": a.run.reason, "run_fix": a.run.fix}
        for a in rows
    ])
    ui.backends_table(rows, on)
    where = f"on {on}" if on else "here"
    ui.final(f"{sum(a.lower.ok for a in rows)} of {len(rows)} backends lower {where}, {sum(a.run.ok for a in rows)} run {where}")
    for line in backend_plugin_errors():
        ui.warn(f"backend plugin not loaded: {line}")
    return int(ExitStatus.OK)


def _cmd_cache(args, ui) -> int:
    from .api import artifact_cache

    clear = args.cache_command == "clear"
    root, entries, size = artifact_cache(clear)
    line = (f"removed {entries} cached artifact(s), {size / 2**20:.1f} MB, from {root}" if clear
            else f"{root}: {entries} cached artifact(s), {size / 2**20:.1f} MB")
    ui.out.print(line, highlight=False)
    ui.final(line)
    ui.document({"directory": str(root), "removed" if clear else "artifacts": entries, "bytes": size})
    return int(ExitStatus.OK)


def _cmd_setup(args, ui) -> int:
    from .api import setup_arm64

    found = setup_arm64(ui.note)
    line = f"Arm64 proof ready: {found['method']} (export --prove-on arm64)"
    ui.out.print(line, highlight=False)
    ui.final(line)
    ui.document(found)
    return int(ExitStatus.OK)


def _cmd_models(ui) -> int:
    from .api import catalog

    models = catalog()
    ui.models_table([spec for spec, _ in models])
    ui.final(f"{len(models)} catalog models")
    ui.document([{"name": s.name, "category": s.family, "task": s.task, "inputs": [list(i.shape) for i in s.inputs],
                  "outputs": outputs, "labels": s.labels} for s, outputs in models])
    return int(ExitStatus.OK)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
