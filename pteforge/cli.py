"""The command line: parse, call the API, render, map errors to exit codes.

Kept light: importing this module imports neither torch nor ExecuTorch, so
``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .errors import ExitStatus, NoBackendError, PteforgeError, UsageError

GLOBAL = ("--debug", "-q", "--quiet", "-v", "--verbose", "--json")
COMMANDS = ("export", "validate", "bench", "select", "manifest", "publish", "backends", "models", "docs", "cache")


def _common(default) -> argparse.ArgumentParser:
    """The options of every command. A command's own subcommands (``manifest check``) take
    them too, with ``default`` SUPPRESS so that they do not undo one given before them."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=default, help="show tracebacks")
    said = common.add_mutually_exclusive_group()
    said.add_argument("-q", "--quiet", action="store_true", default=default, help="print only errors and the final line")
    said.add_argument("-v", "--verbose", action="store_true", default=default,
                      help="print every stage on its own line, and the libraries' warnings and logs")
    said.add_argument("--json", action="store_true", default=default,
                      help="print one JSON document on stdout, with the same fields as the files; progress and "
                           "errors go to stderr")
    return common


def _parser() -> argparse.ArgumentParser:
    from . import __version__


    parser = argparse.ArgumentParser(
        prog="pteforge",
        description="Turn PyTorch models into ExecuTorch programs (.pte) for every backend, and prove each one works.",
        epilog="With no command, exports every catalog model with every backend that can lower here.",
    )
    parser.add_argument("--version", action="version", version=f"pteforge {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command")
    common, inner = _common(False), _common(argparse.SUPPRESS)

    ex = sub.add_parser("export", parents=[common], help="export models to .pte, one per target (default command)")
    ex.add_argument("-c", "--config", default=None, metavar="FILE",
                    help="read the export's options from a pteforge.toml, or [tool.pteforge] of a pyproject.toml; "
                         "flags override the file. Without -c: the nearest pteforge.toml, or pyproject.toml "
                         "with [tool.pteforge], from here up to the project's root")
    ex.add_argument("--no-config", action="store_true", help="read no config file, not even one found here")
    _model_options(ex)
    _target_options(ex)
    _output_options(ex)
    _inspection_commands(sub, common)
    _file_commands(sub, common, inner)
    parser.export_parser = ex  # -c FILE sets its defaults
    return parser


def _model_options(ex) -> None:
    from .families import families

    sel = ex.add_argument_group("models")
    for fam in families():  # one flag per task family: --mobilenet, --yolo, --yolo-pose, ...
        if fam.models:
            sel.add_argument(f"--{fam.word}", nargs="*", metavar="NAME", dest=fam.word.replace("-", "_"),
                             help=f"{fam.model_help} [category {fam.category}]")
    sel.add_argument("--all", action="store_true", help="every catalog model")
    sel.add_argument("--model", action="append", default=[], metavar="REF",
                     help="custom model: package.module:factory(literal args...), path/to/file.py:factory, file.pt2, "
                          "file.onnx, a TorchScript file (.pt, .ptl, .torchscript) or an Ultralytics checkpoint "
                          "(yolo train's best.pt: exported as its family, with its own classes) (repeatable)")
    sel.add_argument("--llm", action="append", default=[], metavar="ID_OR_DIR",
                     help="a decoder-only language model: a Hugging Face id or a local checkpoint directory "
                          "(repeatable) [category gemma]")
    sel.add_argument("--max-seq-len", type=int, default=None, metavar="N",
                     help="language models: the KV cache's length, prompt and generated tokens together (default 128)")
    sel.add_argument("--input-shape", action="append", default=[], metavar="[NAME=][DTYPE:]N,C,H,W",
                     help="input shape of a --model (repeat for several inputs; an ONNX file's by name, e.g. "
                          "images=1,3,640,640, and a scalar's value, e.g. sr=int64:16000), or 1,3,S,S for the catalog "
                          "models named")
    sel.add_argument("--input-dtype", action="append", default=[], metavar="DTYPE",
                     help="dtype of each --input-shape (default float32)")
    sel.add_argument("--labels", action="store_true",
                     help=f"write every family's labels file ({', '.join(sorted({f.labels_file for f in families() if f.labels_file}))})")
    own = ex.add_argument_group("your own model, as the app shows it (with --model)")
    own.add_argument("--task", default=None, metavar="TASK",
                     help="what the model does, so the app shows it: classification, detection, pose, face, segmentation "
                          "(or a family's category: "
                          f"{', '.join(f.category for f in families() if f.preprocessing is not None)}); it takes that "
                          "family's decoding, agreement on the photos, labels and preprocessing (detectors: Ultralytics' "
                          "output layout). Without it the model's category is custom, which the app hides")
    own.add_argument("--name", default=None, help="the model's name in files and the app (default: the file's, the "
                                                  "factory's, or for a factory called build/make/... its file's)")
    own.add_argument("--labels-file", default=None, metavar="FILE",
                     help="its classes, one per line (checked against its output; default: the task family's)")
    own.add_argument("--mean", default=None, metavar="R,G,B", help="per-channel mean after scaling pixels to 0-1 "
                                                                    "(default: the task family's)")
    own.add_argument("--std", default=None, metavar="R,G,B", help="per-channel std (default: the task family's)")
    own.add_argument("--fit", default=None, choices=["crop", "letterbox", "stretch"],
                     help="how a photo becomes its square input (default: the task family's)")


def _target_options(ex) -> None:
    from .backends import default_registry
    from .platforms import PLATFORMS, describe

    tg = ex.add_argument_group("targets")
    tg.add_argument("--target", "--platform", dest="target", choices=[*PLATFORMS, "all"], default=None,
                    help=f"a platform's backends in its priority order ({describe()})")
    tg.add_argument("--backends", nargs="+", metavar="TARGET",
                    help="targets: BACKEND[+BACKEND...][:PRECISION], e.g. xnnpack coreml vulkan+xnnpack xnnpack:int8; "
                         f"backends: {', '.join(default_registry().names())} (default: every backend that can lower here)")
    pr = ex.add_argument_group("precision")
    pr.add_argument("--precision", default=None, metavar="auto|PRECISION",
                    help="precision of targets that name none (fp32, fp16, int8, int8-dynamic, int8-weight, int4-weight), "
                         "or auto: for each backend that runs here, try every precision it takes and pick the fastest "
                         "within --accuracy-budget")
    pr.add_argument("--accuracy-budget", default=None, metavar="top1=F,boxes=F,sqnr=DB",
                    help="what a quantized artifact may lose against fp32 eager on the validation photos, and what "
                         "auto chooses within (default: top1=0.99 for classifiers, boxes=0.95 matched at IoU 0.5 for "
                         "detectors, sqnr=20 otherwise); one that misses it is told where it breaks")
    pr.add_argument("--accuracy-report", action="store_true",
                    help="for every quantized artifact, print the layers that lose most against fp32 (by eager "
                         "module) and what to try; report.html shows them too")
    pr.add_argument("--calibration", default=None, metavar="DIR",
                    help="calibrate quantized targets on the images in DIR, through the model's own preprocessing "
                         "(default for image models: views of the photos our dependencies ship), or on the input "
                         "files in DIR (.npy or .npz, one sample a file, any model), verifying on files calibration "
                         "did not use")
    pr.add_argument("--calibration-samples", type=int, default=16, metavar="N",
                    help="inputs used to calibrate quantized targets (default 16)")


def _output_options(ex) -> None:
    out = ex.add_argument_group("output and proof")
    out.add_argument("--out", default="models", metavar="DIR", help="output directory (default: models)")
    out.add_argument("--weights", default="pretrained", metavar="pretrained|none|PATH",
                     help="pretrained (library download; a --model checkpoint: its own weights), none (seeded random init) "
                          "or a local state dict (or an Ultralytics checkpoint of the same architecture)")
    out.add_argument("--seed", type=int, default=0, help="seed for random weights and inputs (default 0)")
    out.add_argument("--no-verify", dest="verify", action="store_false", help="skip running artifacts on this host")
    out.add_argument("--no-simulate", dest="simulate", action="store_false",
                     help="do not prove on reference simulators what this host cannot run (TOSA, Ethos-U, Cortex-M): "
                          "those rows need a device")
    out.add_argument("--no-fallback", dest="fallback", action="store_false",
                     help="fail a target when a backend's pass crashes on part of the graph (default: that part runs "
                          "on the portable kernels, the rest stays delegated, and the summary says so)")
    out.add_argument("--dry-run", action="store_true",
                     help="check the options and print the plan (models, targets, downloads), then stop: nothing is written")
    out.add_argument("--verify-inputs", type=int, default=3, metavar="N",
                     help="inputs besides the example input used to verify (default 3): seeded, or the input files of "
                          "--calibration DIR that calibration does not use")
    out.add_argument("--bench-runs", type=int, default=10, metavar="N",
                     help="timed runs after warm-up of each artifact that runs here, for its p50 (default 10, "
                          "fewer for one slower than 0.1 s a run, at least 5; 0: none)")
    out.add_argument("--tolerance", type=float, default=None, metavar="DB",
                     help="minimum SQNR in dB against eager (default depends on precision)")
    out.add_argument("--base-url", default=None, metavar="URL", help="make remoteUrl absolute under URL")
    out.add_argument("--timeout", type=float, default=1200.0, metavar="S",
                     help="seconds per model capture and per target before its worker is killed (default 1200)")
    out.add_argument("--jobs", type=int, default=None, metavar="N",
                     help="worker processes (default: one per core; with --executor ray: the local cluster's CPUs)")
    out.add_argument("--executor", choices=["local", "ray"], default="local",
                     help="local: worker processes on this machine (default); ray: each capture and (model, target) "
                          "job as a Ray task (pteforge[ray])")
    out.add_argument("--ray-address", default=None, metavar="ADDR",
                     help="with --executor ray: the cluster to use, e.g. 10.0.0.5:6379 (default: start a local one)")
    out.add_argument("--oplist", action="store_true",
                     help="selective build: selected_operators.yaml per artifact and merged, plus executorch_link.cmake")
    out.add_argument("--no-cache", dest="cache", action="store_false",
                     help="do the work even when the cache holds this exact artifact (the result is cached anyway)")
    out.add_argument("--bundle", action="store_true",
                     help="also write a BundledProgram (.bpte) with verification inputs and expected outputs")

    pu = ex.add_argument_group("publishing")
    pu.add_argument("--publish", default=None, metavar="SITE",
                    help="after the export, lay out SITE/versions.json and SITE/<version>/index.json as the "
                         "executorch_flutter app fetches them (as pteforge publish OUT --site SITE)")
    pu.add_argument("--publish-runtime", "--publish-version", dest="publish_runtime", nargs="+", default=None,
                    metavar="V", help="the app runtimes' ExecuTorch versions to publish for (as publish --runtime)")
    pu.add_argument("--publish-base-url", default=None, metavar="URL", help="the URL SITE is served at")
    pu.add_argument("--publish-relative", action="store_true", default=None,
                    help="publish without --publish-base-url: remoteUrl stays relative on purpose")


def _inspection_commands(sub, common) -> None:
    """validate, bench and select: what an export's artifacts do."""
    from .platforms import PLATFORMS

    va = sub.add_parser("validate", parents=[common], help="run every artifact on real images and compare with eager PyTorch")
    va.add_argument("dir", nargs="?", default=None, metavar="DIR", help="the same as --models-dir DIR (as pteforge bench DIR)")
    va.add_argument("--models-dir", default=None, metavar="DIR", help="where the artifacts and index.json are (default: models)")
    va.add_argument("--images-dir", default=None, metavar="DIR",
                    help="images to run (default: the photos our dependencies ship: Ultralytics' bus.jpg and zidane.jpg, "
                         "Matplotlib's grace_hopper.jpg, scikit-learn's china.jpg and flower.jpg, those installed)")
    va.add_argument("--output-file", default=None, metavar="FILE",
                    help="JSON report (default: <models-dir>/validation_report.json)")
    va.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds per file before it is killed")
    va.add_argument("--draw", nargs="?", const="", default=None, metavar="DIR",
                    help="write every photo annotated with what each program found (boxes, keypoints, masks, top-5) "
                         "to DIR (default: <models-dir>/validation), linked from report.html")

    bn = sub.add_parser("bench", parents=[common], help="latency, load time, peak memory of every artifact that runs here")
    bn.add_argument("path", nargs="?", default="models", metavar="DIR|FILE", help="default: models")
    bn.add_argument("--runs", type=int, default=20, metavar="N", help="timed runs after warm-up (default 20)")
    bn.add_argument("--warmup", type=int, default=3, metavar="N", help="warm-up runs (default 3)")
    bn.add_argument("--compare", choices=["eager"], default=None, help="time eager PyTorch, and ONNX Runtime where it is installed, beside each artifact")

    se = sub.add_parser("select", parents=[common], help="which artifact a device of PLATFORM loads first (its fallback "
                        "order), or without --platform which one this host loads, with the fallbacks skipped")
    se.add_argument("names", nargs="+", metavar="[MANIFEST] MODEL",
                    help="the manifest (an index.json or its directory; default: models/index.json) and the model")
    se.add_argument("--platform", default=None, choices=[*PLATFORMS, "all"],
                    help="a device's platform: its order and its own delegates, nothing loaded here (default: "
                         "this host, its platform's order, each file loaded; all: every platform's artifacts, here)")
    se.add_argument("--manifest", default=None, metavar="FILE", help="the manifest, as the first of two names")


def _file_commands(sub, common, inner) -> None:
    """manifest, publish, docs, backends, models and cache."""
    mf = sub.add_parser("manifest", parents=[common], help="check a manifest, or print its JSON Schema")
    mf_sub = mf.add_subparsers(dest="manifest_command", required=True)
    mc = mf_sub.add_parser("check", parents=[inner], help="validate FILE against pteforge's manifest schema")
    mc.add_argument("file", metavar="FILE")
    mf_sub.add_parser("schema", parents=[inner], help="print the manifest's JSON Schema")

    pb = sub.add_parser("publish", parents=[common],
                        help="lay out OUT as the executorch_flutter app fetches it: SITE/versions.json, SITE/<version>/index.json")
    pb.add_argument("out", metavar="OUT", help="an export's output directory (with index.json)")
    pb.add_argument("--site", required=True, metavar="DIR", help="the directory a web server serves to the app")
    pb.add_argument("--runtime", "--version", dest="site_runtimes", nargs="+", default=None, metavar="V",
                    help="the ExecuTorch versions of the app runtimes to publish for, one directory each (default: "
                         "every one that loads the artifacts: for 1.5.1, 1.5.0 1.5.1 1.6.0)")
    pb.add_argument("--base-url", default=None, metavar="URL",
                    help="the URL SITE is served at: remoteUrl becomes URL/<version>/<file> (the app downloads it as is)")
    pb.add_argument("--relative", action="store_true",
                    help="publish without --base-url: remoteUrl stays relative, for an app given such URLs on purpose")

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


def _with_config(parser, given, argv: list[str]):
    """The command line again, with the config file's values as the export's defaults:
    a flag on the command line wins over the file (a repeated flag replaces its list)."""
    from .config import load_config, locations

    values = load_config(Path(given.config), {a.dest: list(a.choices) for a in parser.export_parser._actions if a.choices})
    if values.get("model"):  # its package.module:factory references, from a subdirectory too
        from .models.custom import import_from

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
    return args


def _located(exc: UsageError, args) -> UsageError:
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
    located = type(exc)(f"{where}: {dest.replace('_', '-')}: {text}", fix=exc.fix)
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
    return ["export", *argv]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args, extra = parser.parse_known_args(_normalise_argv(argv))
    if extra and args.command == "select" and not any(e.startswith("-") for e in extra):
        args.names += extra  # select's names around an option (`select models --platform ios m`): argparse takes the first only
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.bare = not argv
    debug = bool(getattr(args, "debug", False)) or "--debug" in argv
    if not debug and not getattr(args, "verbose", False):
        import logging
        import warnings

        # Library chatter (deprecations, INFO logs from partitioners) hides our progress.
        warnings.filterwarnings("ignore")
        logging.basicConfig(level=logging.WARNING)
        logging.getLogger().setLevel(logging.WARNING)
    from .render import Renderer

    ui = Renderer(quiet=getattr(args, "quiet", False), verbose=getattr(args, "verbose", False),
                  json=getattr(args, "json", False))
    if ui.verbose:
        import logging

        logging.basicConfig(level=logging.INFO)
    try:
        if args.command == "export" and args.config is None and not args.no_config:
            from .config import discover

            found = discover(Path.cwd())
            if found is not None:
                ui.note(f"export options from {found} (flags override them; --no-config to ignore the file)")
                args.config = str(found)
        if getattr(args, "config", None):
            args = _with_config(parser, args, argv)
        return _run(args, ui, debug)
    except NoBackendError as exc:
        if debug:
            ui.traceback()
        ui.no_backend(exc)
        return _failed(ui, str(exc), exc.exit_status, said=False)
    except PteforgeError as exc:
        if debug:
            ui.traceback()
        if isinstance(exc, UsageError):
            exc = _located(exc, args)
        return _failed(ui, exc.one_line(), exc.exit_status)
    except KeyboardInterrupt:
        return _failed(ui, "interrupted: artifacts and the manifest hold what finished before Ctrl-C", ExitStatus.INTERRUPTED)
    except Exception as exc:  # a bug: one line unless --debug
        if debug:
            ui.traceback()
        from .errors import one_line

        return _failed(ui, f"internal error: {one_line(exc)} (run with --debug for the traceback)", ExitStatus.INTERNAL)


def _failed(ui, line: str, status, said: bool = True) -> int:
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
        "cache": _cmd_cache, "publish": _cmd_publish,
    }
    if args.command in commands:
        return commands[args.command](args, ui)
    return _cmd_export(args, ui, debug)


def _cmd_docs(args, ui) -> int:
    from .host import host
    from .io import write_atomic
    from .docs import write_docs

    for path in write_docs(Path(args.out) / "backends", host()):
        ui.out.print(f"wrote {path}")
    write_atomic(Path(args.out) / "cli.md", cli_reference())
    ui.out.print(f"wrote {Path(args.out) / 'cli.md'}")
    return int(ExitStatus.OK)


def cli_reference() -> str:
    """The CLI reference page: every command's help, from the parser itself (so it cannot go
    stale; ``tests/test_docs.py`` checks the committed page is this)."""
    parser = _parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]

    def text(p: argparse.ArgumentParser) -> str:
        p.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100, max_help_position=32)
        return p.format_help().rstrip()

    lines = ["# CLI reference", "", "Generated from the parser by `pteforge docs`; `pteforge COMMAND --help` prints the same.",
             "", "```text", text(parser), "```", ""]
    for name, sub in commands.choices.items():
        lines += [f"## `pteforge {name}`", "", "```text", text(sub), "```", ""]
    return "\n".join(lines)


def _selected_models(args) -> list:
    from .families import families
    from .models import select_models

    chosen = {fam.word.replace("-", "_"): getattr(args, fam.word.replace("-", "_"), None) for fam in families() if fam.models}
    own = {"task": args.task, "name": args.name, "labels_file": args.labels_file, "fit": args.fit,
           "mean": args.mean, "std": args.std}
    return select_models(**chosen, every=args.all, refs=args.model, llms=args.llm, max_seq_len=args.max_seq_len,
                         input_shapes=args.input_shape, input_dtypes=args.input_dtype, labels_only=args.labels, own=own)


def _own_targets(models: list, requests, args) -> tuple[list, list | None]:
    """Where a config file's [[model]] table gives a model its own backends or precision: the
    run's requests become those of every model together, and each model keeps the names of
    its own targets (``ModelSpec.targets``), the others the run's."""
    import dataclasses

    from .api import plan_targets

    if not any(m.targets for m in models):
        return models, requests

    def asked(plan) -> tuple[str, ...]:
        return tuple(t.name for t in plan.targets if t.name not in plan.references)

    run = plan_targets(requests, platform=args.target, precision=args.precision)
    every, named = list(asked(run)), []
    for m in models:
        if not m.targets:
            named.append(dataclasses.replace(m, targets=asked(run)))
            continue
        own = [r.replace("*", b.split(":")[0], 1) for r in m.targets for b in (asked(run) if r.startswith("*:") else [r])]
        mine = asked(plan_targets(own, precision=args.precision))
        every += [t for t in mine if t not in every]
        named.append(dataclasses.replace(m, targets=mine))
    return named, every


def _cmd_export(args, ui, debug: bool) -> int:
    models = _selected_models(args)
    from .api import TargetPlan, export, plan_targets

    if args.calibration:
        from .samples import holds_samples
        from .vision import image_dir

        _, note = (None, None) if holds_samples(args.calibration) else \
            image_dir(args.calibration, "--calibration", args.calibration_samples)
        if note:
            ui.warn(note)
    requests, others = args.backends, []
    if requests is None and args.target is None and models and all(m.task == "text-generation" for m in models):
        from .llm import default_targets

        requests, others = default_targets()  # every precision of the backends that export language models
    ui.accuracy_report = args.accuracy_report
    models, requests = _own_targets(models, requests, args)
    plan = plan_targets(requests, platform=args.target, precision=args.precision) if models else None
    if plan:
        plan.unavailable += others
    if plan and plan.unavailable:
        ui.unavailable(plan)
    config = _export_config(args, debug)
    if args.dry_run or getattr(args, "bare", False):  # bare `pteforge` is the largest run: its plan first
        from .api import check_run

        check_run(models, config, plan)
        ui.plan(models, plan or TargetPlan([]), config)
        if args.dry_run:
            ui.dry_run()
            return int(ExitStatus.OK)
    _check_surroundings(args, ui)
    with ui.progress() as reporter:
        result = export(models, plan or TargetPlan([]), config, reporter, write_labels=args.labels)
    ui.summary(result, models)
    _export_said(ui, result, config)
    if args.publish and result.manifest_path:
        _publish(ui, config.out_dir, args.publish, args.publish_runtime, args.publish_base_url, args.publish_relative)
    elif args.publish:
        ui.warn(f"nothing published to {args.publish}: the export wrote no manifest")
    return int(ExitStatus.OK if result.ok else ExitStatus.TARGETS_FAILED)


def _export_said(ui, result, config) -> None:
    """The export's final line, and with --json its document: the manifest written
    (index.json) and the rows that failed (report.json's), as the files hold them."""
    import json

    from .report.manifest import MANIFEST_NAME
    from .result import proof_counts

    rows = [r for r in result.records if r.target not in result.references]
    good = [r for r in rows if r.status.ok]
    asked = len(rows) + len(result.unavailable)
    where = f"manifest {shown(result.manifest_path)}" if result.manifest_path else "no manifest written"
    ui.final(f"exported {len(good)}/{asked} target(s)" + (f": {proof_counts(good)}" if good else "") + f"; {where}")
    if ui.json:
        index = Path(config.out_dir) / MANIFEST_NAME
        report = Path(config.out_dir) / "report.json"
        ui.document({**(json.loads(index.read_text()) if result.manifest_path and index.is_file() else {}),
                     "lastRunFailures": json.loads(report.read_text()).get("last_run_failures", [])
                     if report.is_file() else []})


def shown(path) -> str:
    """A path as the user can type it from here: relative to the working directory when under it."""
    import os

    path = Path(path)
    try:
        return os.path.relpath(path) if path.resolve().is_relative_to(Path.cwd().resolve()) else str(path)
    except (OSError, ValueError):
        return str(path)


def _export_config(args, debug: bool):
    """The export's options from the parsed command line (and config file)."""
    from .spec import AccuracyBudget, ExportConfig

    return ExportConfig(
        out_dir=Path(args.out),
        weights=args.weights,
        seed=args.seed,
        verify=args.verify,
        verify_inputs=args.verify_inputs,
        tolerance=args.tolerance,
        calibration_samples=args.calibration_samples,
        calibration_dir=Path(args.calibration).resolve() if args.calibration else None,
        accuracy_budget=AccuracyBudget.parse(args.accuracy_budget) if args.accuracy_budget else None,
        base_url=args.base_url,
        bundle=args.bundle,
        fallback=args.fallback,
        simulate=args.simulate,
        oplist=args.oplist,
        timeout=args.timeout,
        jobs=args.jobs,
        debug=debug,
        cache=args.cache,
        bench_runs=args.bench_runs,
        executor=args.executor,
        ray_address=args.ray_address,
    )


def _check_surroundings(args, ui) -> None:
    """Before any work: the site ``--publish`` writes (refused when it cannot be), and the
    cache directory (a warning when it cannot be written: the run goes on without it)."""
    from .io import CACHE_ENV, unwritable

    if args.publish:
        from .publish import check_site
        from .spec import check_base_url

        if args.publish_base_url is not None:
            check_base_url(args.publish_base_url, "--publish-base-url")
        elif not args.publish_relative:
            raise UsageError("--publish without --publish-base-url: the executorch_flutter app downloads remoteUrl as "
                             "it is, and a relative one does not download",
                             fix="give --publish-base-url URL (where SITE will be served), or --publish-relative")
        check_site(Path(args.publish), "--publish")
        if args.publish_runtime:
            from importlib.metadata import version

            from .publish import runtimes_for

            runtimes_for(version("executorch").split("+")[0], args.publish_runtime, "--publish-runtime")
    if (why := unwritable()) is not None:
        ui.warn(f"cannot write the cache directory {why}: this run keeps nothing there for the next one "
                f"(fix: set {CACHE_ENV} to a writable directory)")


def _cmd_validate(args, ui) -> int:
    from .vision import image_dir, shipped_images

    if args.dir and args.models_dir and Path(args.dir).resolve() != Path(args.models_dir).resolve():
        raise UsageError(f"two directories to validate: {args.dir} and --models-dir {args.models_dir}", fix="give one of them")
    if not args.timeout > 0 or args.timeout == float("inf"):
        raise UsageError(f"--timeout must be a positive number of seconds (got {args.timeout:g})",
                         fix="give the seconds a file may take, e.g. --timeout 300")
    models_dir = Path(args.dir or args.models_dir or "models")
    if not models_dir.is_dir():
        raise UsageError(f"{models_dir} is not a directory", fix="export first, or give the directory of your artifacts")
    if args.images_dir:
        images, note = image_dir(args.images_dir, "--images-dir")
        if note:
            ui.warn(note)
    else:
        images = shipped_images()
    from .validate import validate, write_report

    draw = None if args.draw is None else Path(args.draw or models_dir / "validation")
    with ui.progress() as reporter:
        results = validate(models_dir, images, on_file=reporter.file_done, timeout=args.timeout, draw=draw)
    output = Path(args.output_file) if args.output_file else models_dir / "validation_report.json"
    write_report(output, results, images, models_dir)
    ui.validation_table(results, shown(output))
    from .report.summary import rewrite_html

    if rewrite_html(models_dir, output):
        ui.out.print(f"Report: {shown(models_dir / 'report.html')} (with this validation{' and its drawings' if draw else ''})")
    from .result import Status, proof_counts

    ui.final(f"validated {len(results)} file(s): {proof_counts(results) or 'none proven'}; report {shown(output)}")
    if ui.json:
        import json

        ui.document(json.loads(output.read_text()))

    return int(ExitStatus.OK if all(Status(r.status).ok for r in results) else ExitStatus.TARGETS_FAILED)


def _cmd_bench(args, ui) -> int:
    from .bench import bench

    if not Path(args.path).exists():
        raise UsageError(f"{args.path}: no such file or directory", fix="give a directory of artifacts or a .pte")
    if args.runs < 1 or args.warmup < 0:
        raise UsageError("--runs must be >= 1 and --warmup >= 0", fix="give positive numbers")
    results = bench(Path(args.path), args.runs, args.warmup, args.compare == "eager")
    ui.bench_table(results)
    from .result import Status

    timed = sum(r.status is None for r in results)
    ui.final(f"timed {timed} of {len(results)} file(s) on this host")
    ui.document({"files": [_bench_entry(r) for r in results]})

    return int(ExitStatus.OK if all(r.status in (None, Status.NOT_RUNNABLE_HERE) for r in results) else ExitStatus.TARGETS_FAILED)


def _bench_entry(r) -> dict:
    """One file of ``bench --json``: its numbers as bench records them in the manifest."""
    return {"file": r.file, "status": "measured" if r.status is None else r.status.value, "reason": r.reason,
            **r.numbers, "eager": r.eager, "onnxruntime": r.onnxruntime, "simulated": r.simulated}


def _cmd_select(args, ui) -> int:
    from .selection import select

    if len(args.names) > 2:
        raise UsageError(f"select takes a manifest and a model, not {len(args.names)} names",
                         fix="pteforge select [models/index.json] MODEL")
    *given, model = args.names
    manifest = given[0] if given else args.manifest or "models/index.json"
    if given and args.manifest and Path(given[0]).resolve() != Path(args.manifest).resolve():
        raise UsageError(f"two manifests: {given[0]} and --manifest {args.manifest}", fix="give one of them")
    selection = select(manifest, model, args.platform)
    ui.selection(selection)
    ui.final(f"{selection.model}: {shown(selection.path)}" if selection.entry else f"{selection.model}: none")
    ui.document({"model": selection.model, "platform": selection.platform, "device": selection.device,
                 "order": selection.order, "skipped": [{"backend": n, "why": w} for n, w in selection.skipped],
                 "selected": selection.entry.name if selection.entry else None,
                 "target": selection.entry.target if selection.entry else None,
                 "path": str(selection.path) if selection.entry else None})
    from .errors import ExitStatus as E

    return int(E.OK if selection.entry else E.TARGETS_FAILED)


def _cmd_manifest(args, ui) -> int:
    import json

    from .report.manifest import Manifest, load_manifest

    if args.manifest_command == "schema":
        print(json.dumps(Manifest.model_json_schema(), indent=2))
        return int(ExitStatus.OK)
    from .errors import ManifestError
    from .report.app import notes, rejections
    from .report.manifest import MANIFEST_NAME

    path = Path(args.file) / MANIFEST_NAME if Path(args.file).is_dir() else Path(args.file)  # an export's directory
    try:
        manifest = load_manifest(path)
    except ManifestError as exc:  # its fix is the export's (move it away); here the file is the question
        raise ManifestError(exc.args[0], fix="compare it with `pteforge manifest schema`, or export again to rebuild it") from None
    if manifest is None:
        raise UsageError(f"no such file: {path}", fix="give the path of an index.json, or of its directory")
    raw = json.loads(path.read_text())
    for older, which in ((False, "the executorch_flutter app"), (True, "the older executorch_flutter app")):
        problems = rejections(raw, older)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ManifestError(f"{which} would reject this: {problems[0]}{more}",
                                fix="regenerate it with pteforge export, or add the field")
    line = (f"{shown(path)}: valid pteforge manifest (schema_version {manifest.schema_version}), read by the "
            f"executorch_flutter app (current and older parser): {len(manifest.models)} artifact(s) for the app, "
            f"{len(manifest.references)} reference(s), {len(manifest.failed)} failed")
    ui.out.print(line)
    for note in notes(raw):
        ui.out.print(f"  note: {note}")
    ui.final(line)
    ui.document({"file": str(path), "valid": True, "schemaVersion": manifest.schema_version,
                 "artifacts": len(manifest.models), "references": len(manifest.references),
                 "failed": len(manifest.failed), "notes": notes(raw)})
    return int(ExitStatus.OK)


def _cmd_publish(args, ui) -> int:
    _publish(ui, Path(args.out), args.site, args.site_runtimes, args.base_url, args.relative)
    return int(ExitStatus.OK)


def _publish(ui, out: Path, site: str, runtimes: list[str] | None, base_url: str | None, relative: bool | None) -> None:
    from .publish import publish

    done = publish(Path(out), Path(site), runtimes, base_url, bool(relative))
    line = (f"published {done.files} file(s) made with ExecuTorch {done.made_with} for the runtimes "
            f"{', '.join(done.runtimes)} (under {site}); versions.json: {', '.join(done.versions)} (latest {done.latest})")
    ui.out.print(line)
    ui.final(line)
    if not base_url:
        ui.warn("--relative: remoteUrl entries are relative, and the executorch_flutter app downloads remoteUrl as it is")


def _cmd_backends(args, ui) -> int:
    from .api import backends

    from .system import os_name

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
    from .backends import PLUGIN_ERRORS

    for line in PLUGIN_ERRORS:
        ui.warn(f"backend plugin not loaded: {line}")
    return int(ExitStatus.OK)


def _cmd_cache(args, ui) -> int:
    from . import cache

    root = cache.artifacts_dir()
    if args.cache_command == "clear":
        entries, size = cache.clear()
        line = f"removed {entries} cached artifact(s), {size / 2**20:.1f} MB, from {root}"
    else:
        entries, size = cache.info()
        line = f"{root}: {entries} cached artifact(s), {size / 2**20:.1f} MB"
    ui.out.print(line, highlight=False)
    ui.final(line)
    ui.document({"directory": str(root), "removed" if args.cache_command == "clear" else "artifacts": entries,
                 "bytes": size})
    return int(ExitStatus.OK)


def _cmd_models(ui) -> int:
    from .models.catalog import build_catalog

    from .families import family

    specs = list(build_catalog())
    ui.models_table(specs)
    ui.final(f"{len(specs)} catalog models")
    ui.document([{"name": s.name, "category": s.family, "task": s.task, "inputs": [list(i.shape) for i in s.inputs],
                  "outputs": family(s.family).outputs, "labels": s.labels} for s in specs])
    return int(ExitStatus.OK)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
