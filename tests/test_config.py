"""`pteforge export -c FILE`: options from a pteforge.toml or [tool.pteforge]; flags win."""

import json

import pytest
from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus

CONFIG = """\
# the export's options, under the flags' names
model = ["tiny_models:sized(classes=3)"]
input-shape = ["1,3,16,16"]
weights = "none"
backends = ["xnnpack", "portable"]
bench-runs = 0
"""


def test_a_config_file_runs_the_export_and_flags_override_it(capsys, tmp_path):
    (tmp_path / "pteforge.toml").write_text(CONFIG + f'out = "{tmp_path / "from-file"}"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == ExitStatus.OK, err
    entries = json.loads((tmp_path / "from-file" / "index.json").read_text())["models"]
    assert {e["target"] for e in entries} == {"xnnpack", "portable"} and entries[0]["source"] == "tiny_models:sized(classes=3)"

    # flags win: another --out, one backend, another model
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--out", tmp_path / "flags",
                       "--backends", "portable", "--model", "tiny_models:tiny")
    assert code == ExitStatus.OK, err
    [e] = json.loads((tmp_path / "flags" / "index.json").read_text())["models"]
    assert e["target"] == "portable" and e["source"] == "tiny_models:tiny"


def test_pyproject_tool_table(capsys, tmp_path):
    body = "\n".join(f"{line}" for line in CONFIG.splitlines() if not line.startswith("#"))
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "app"\n\n[tool.pteforge]\n{body}\nout = "{tmp_path / "o"}"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pyproject.toml", "--backends", "portable")
    assert code == ExitStatus.OK, err
    assert json.loads((tmp_path / "o" / "index.json").read_text())["models"][0]["target"] == "portable"


@pytest.mark.parametrize(
    "text, needle",
    [
        ('out = "x"\nbackend = ["xnnpack"]\n', "pteforge.toml:2: backend is not an option; did you mean backends?"),
        ('seed = "seven"\n', "pteforge.toml:1: seed has a wrong value"),
        ('out = "x"\nbackends = [xnnpack]\n', "pteforge.toml:2: not valid TOML: Invalid value, column 13 (fix: "),
        ('seed = 1\nbackends = ["xnnpack"\n', "pteforge.toml:2: not valid TOML: Unclosed array (the file ends inside it)"),
        ('seed = 1\nseed = 2\n', "pteforge.toml:2: not valid TOML: Cannot overwrite a value, column 9 (fix: that key is set twice"),
        ('model = ["tiny_models:tiny"]\ntask = "clasification"\n',
         "pteforge.toml:2: task has a wrong value: 'clasification' is not one of classification, detection"),
        ('target = "ios"\nplatform = "web"\n', "pteforge.toml:2: target and platform are the same option"),
        ('platform = "mars"\n', "pteforge.toml:1: platform has a wrong value: 'mars' is not one of ios, android"),
        ('out = "x"\nexecutor = "dask"\n', "pteforge.toml:2: executor has a wrong value: 'dask' is not one of local, ray"),
        ('out = "x"\n[[model]]\nname = "net"\n', "pteforge.toml:2: [[model]] table 1: source is missing"),  # no source
        ('seed = 1\n[extra]\nseed = "two"\n', "pteforge.toml:2: extra is not an option"),
        # a NUL character (TOML's \u0000) fits no path, name or option: the OS refused the path
        ('seed = 1\nout = "models\\u0000"\n', "pteforge.toml:2: out holds a NUL character"),
        ('seed = 1\n[[model]]\nname = "n\\u0000"\nsource = "tiny_models:tiny"\n',
         "pteforge.toml:2: model holds a NUL character"),
        # values only the export itself finds wrong: the line of the option they came from
        ('mobilenet = true\nbackends = ["xnnpack", "nosuch"]\n', "pteforge.toml:2: backends: unknown backend 'nosuch'"),
        ('weights = "none"\nyolo = ["yolo99"]\n', "pteforge.toml:2: yolo: unknown model 'yolo99'"),
        ('mobilenet = true\nprecision = "int3"\n', "pteforge.toml:2: precision: unknown precision 'int3'"),
        ('model = ["tiny_models:tiny"]\ninput-shape = ["1,3,8,8"]\ninput-dtype = ["complex64"]\n',
         "pteforge.toml:3: input-dtype: unsupported --input-dtype 'complex64'"),
    ],
)
def test_errors_name_the_key_and_the_line(capsys, tmp_path, text, needle):
    (tmp_path / "pteforge.toml").write_text(text)
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert needle in line, line


@pytest.mark.parametrize("shapes, expected", [('"1,3,8,8"', ["1,3,8,8"]), ("[1, 3, 8, 8]", ["1,3,8,8"]),
                                             ('[[2, 5], "1"]', ["2,5", "1"])])
def test_input_shapes_may_be_toml_lists_of_integers(tmp_path, shapes, expected):
    from pteforge.ui.config import load_config

    (tmp_path / "pteforge.toml").write_text(f"input-shape = {shapes}\n")
    assert load_config(tmp_path / "pteforge.toml") == {"input_shape": expected}


def test_a_wrong_value_a_flag_gave_is_not_blamed_on_the_file(capsys, tmp_path):
    (tmp_path / "pteforge.toml").write_text('mobilenet = true\nbackends = ["xnnpack"]\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--backends", "nosuch")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "unknown backend 'nosuch'" in line and "pteforge.toml" not in line, line


def test_platform_is_the_targets_other_name(tmp_path):
    """A platform's backends are asked for with --target or --platform, target or platform."""
    from pteforge.cli import _build_parser
    from pteforge.ui.config import load_config

    parse = _build_parser().parse_args
    assert parse(["export", "--platform", "web"]).target == parse(["export", "--target", "web"]).target == "web"
    (tmp_path / "pteforge.toml").write_text('platform = "android"\n')
    assert load_config(tmp_path / "pteforge.toml") == {"target": "android"}


def test_the_file_can_publish_too(capsys, tmp_path):
    site = tmp_path / "site"
    (tmp_path / "pteforge.toml").write_text(CONFIG + f'out = "{tmp_path / "o"}"\npublish = "{site}"\n'
                                            'publish-base-url = "https://example.org/pte"\n')
    code, stdout, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--backends", "portable")
    assert code == ExitStatus.OK, err
    assert "published" in stdout
    versions = json.loads((site / "versions.json").read_text())
    [e] = json.loads((site / versions["latest"] / "index.json").read_text())["models"]
    assert e["remoteUrl"] == f"https://example.org/pte/{versions['latest']}/custom/sized_portable.pte"


def test_paths_in_the_file_are_read_from_its_directory(capsys, tmp_path, monkeypatch):
    """A file found from a subdirectory means what it says: its model file and its out are
    beside it (``nets.py`` was "no such file" when read from where pteforge ran)."""
    import shutil

    from conftest import ROOT

    project = tmp_path / "app"
    (project / "lib" / "deep").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "tiny_models.py", project / "nets.py")
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n\n[tool.pteforge]\nmodel = ["nets.py:tiny"]\n'
                                            'input-shape = ["1,3,16,16"]\nweights = "none"\nbench-runs = 0\nout = "built"\n')
    monkeypatch.chdir(project / "lib" / "deep")
    code, _, err = cli(capsys, "export", "--backends", "portable")
    assert code == ExitStatus.OK, err
    [e] = json.loads((project / "built" / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["source"] == f"{project / 'nets.py'}:tiny", e["source"]
    assert not (project / "lib" / "deep" / "built").exists()
    code, _, err = cli(capsys, "export", "--backends", "portable", "--out", "here")  # a flag: from where it runs
    assert code == ExitStatus.OK, err
    assert (project / "lib" / "deep" / "here" / "index.json").is_file()


def test_a_home_directory_in_the_file_is_expanded(tmp_path, monkeypatch):
    """No shell expands ``~`` in a file: ``out = "~/built"`` made a directory named ``~``
    beside the file."""
    from pteforge.ui.config import load_config

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "pteforge.toml").write_text('out = "~/built"\ncalibration = "~/photos"\nmodel = ["~/nets.py:tiny"]\n')
    values = load_config(tmp_path / "pteforge.toml")
    home = tmp_path / "home"
    assert (values["out"], values["calibration"], values["model"]) == (
        str(home / "built"), str(home / "photos"), [f"{home / 'nets.py'}:tiny"])


@pytest.mark.slow
def test_a_package_the_file_names_is_imported_from_its_directory(tmp_path):
    """``mypkg.nets:tiny`` in a project's ``[tool.pteforge]``, run from a subdirectory, was
    "No module named 'mypkg'": only the current directory was searched. The workers that
    capture and lower the model import it too."""
    import shutil

    from conftest import ROOT, run_cli

    project = tmp_path / "app"
    (project / "mypkg").mkdir(parents=True)
    (project / "docs").mkdir()
    (project / "mypkg" / "__init__.py").write_text("")
    shutil.copy(ROOT / "tests" / "tiny_models.py", project / "mypkg" / "nets.py")
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n\n[tool.pteforge]\nmodel = ["mypkg.nets:tiny"]\n'
                                            'input-shape = ["1,3,16,16"]\nweights = "none"\nbench-runs = 0\n')
    done = run_cli("export", "--backends", "portable", cwd=project / "docs")  # a process of its own: its workers too
    assert done.returncode == ExitStatus.OK, done.stderr
    [e] = json.loads((project / "docs" / "models" / "index.json").read_text())["models"]  # out: a flag's default
    assert e["status"] == "VERIFIED" and e["source"] == "mypkg.nets:tiny"


def test_the_example_config_names_the_apps_whole_catalogue():
    from conftest import ROOT

    from pteforge.ui.config import load_config
    from pteforge.models import select_models
    from pteforge.report.app import APP_CATEGORIES

    values = load_config(ROOT / "examples" / "pteforge.toml")
    families = {k: v for k, v in values.items() if k not in {"labels", "backends", "weights", "out"}}
    specs = select_models(**families)
    # gemma is in the file, commented out: ~1 GB per program, and only xnnpack and coreml
    # of the seed's backends export language models
    assert {s.family for s in specs} == set(APP_CATEGORIES) - {"gemma"}, "every category the app shows"
    assert "# gemma = true" in (ROOT / "examples" / "pteforge.toml").read_text()
    # the seed's backends that ExecuTorch 1.5 still has: it removed MPS (pteforge refuses it, naming metal and coreml)
    assert values["backends"] == ["xnnpack", "coreml", "vulkan"]


def test_without_c_the_nearest_config_is_read_and_the_run_says_so(capsys, tmp_path, monkeypatch):
    """As ruff and pytest find theirs: from here up to the project's root; --no-config reads none."""
    project = tmp_path / "app"
    (project / "lib" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text(f'[project]\nname = "app"\n\n[tool.pteforge]\n{CONFIG}out = "{tmp_path / "o"}"\n')
    monkeypatch.chdir(project / "lib" / "deep")
    code, _, err = cli(capsys, "export", "--backends", "portable")
    assert code == ExitStatus.OK, err
    assert f"export options from {project / 'pyproject.toml'}" in err
    [e] = json.loads((tmp_path / "o" / "index.json").read_text())["models"]
    assert e["target"] == "portable" and e["source"] == "tiny_models:sized(classes=3)"

    (project / "lib" / "pteforge.toml").write_text('seed = "seven"\n')  # nearer, and wrong
    code, _, err = cli(capsys, "export", "--backends", "portable")
    assert code == ExitStatus.USAGE
    assert f"{project / 'lib' / 'pteforge.toml'}:1: seed has a wrong value" in error_lines(err)[0]
    code, out, err = cli(capsys, "export", "--no-config", "--model", "tiny_models:tiny", "--input-shape", "1,3,8,8",
                         "--weights", "none", "--backends", "portable", "--bench-runs", "0", "--out", tmp_path / "flags")
    assert code == ExitStatus.OK, err
    assert "verified: SQNR" in out and "not timed: timing turned off (--bench-runs 0)" in out, "and why it has no p50"
    assert "export options from" not in err and (tmp_path / "flags" / "index.json").is_file()


def test_the_search_stops_at_the_projects_root(tmp_path):
    from pteforge.ui.config import discover

    (tmp_path / "pteforge.toml").write_text("seed = 1\n")
    (tmp_path / "other" / "src").mkdir(parents=True)
    assert discover(tmp_path / "other" / "src") == tmp_path / "pteforge.toml"
    (tmp_path / "other" / "pyproject.toml").write_text('[project]\nname = "other"\n')  # a root without the table
    assert discover(tmp_path / "other" / "src") is None
    (tmp_path / "other" / "pyproject.toml").write_text('[project]\nname = "other"\n[tool.pteforge]\nseed = 2\n')
    assert discover(tmp_path / "other" / "src") == tmp_path / "other" / "pyproject.toml"
    (tmp_path / "git" / ".git").mkdir(parents=True)
    assert discover(tmp_path / "git") is None


def test_a_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    """Windows' Notepad saves UTF-8 with a byte order mark first: it was "not valid TOML:
    Invalid statement, column 1"."""
    from pteforge.ui.config import discover, load_config

    (tmp_path / "pteforge.toml").write_bytes(b"\xef\xbb\xbfseed = 7\nbackends = [\"xnnpack\"]\n")
    assert load_config(tmp_path / "pteforge.toml")["seed"] == 7
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_bytes(b"\xef\xbb\xbf[tool.pteforge]\nseed = 3\n")
    assert discover(tmp_path / "app") == tmp_path / "app" / "pyproject.toml"


def test_a_file_that_is_not_text_is_one_error_and_never_found(capsys, tmp_path):
    (tmp_path / "pteforge.toml").write_bytes(b"seed = \xff\xfe\n")
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "pteforge.toml:1: not valid TOML: byte 0xff is not UTF-8 text (fix: save the file as UTF-8" in line, line

    from pteforge.ui.config import discover

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "pyproject.toml").write_bytes(b"[tool.pteforge]\nseed = \xff\n")
    assert discover(tmp_path / "app") is None, "not a file pteforge could read options from: the project's root all the same"


def test_an_error_naming_a_table_prints_its_brackets(capsys, tmp_path):
    """Errors are printed as written: rich read "[tool.pteforge]" as a style tag and dropped it."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pyproject.toml")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert line.endswith("pyproject.toml has no [tool.pteforge] table (fix: add [tool.pteforge] with the export options)")


def test_an_error_in_pyproject_names_the_line_of_its_own_table(capsys, tmp_path):
    """The same key in another table of pyproject.toml (``[project]``'s) is not the line."""
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\nseed = 1\n\n[tool.pteforge]\nweights = "none"\nseed = "x"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pyproject.toml")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "pyproject.toml:7: tool.pteforge.seed has a wrong value" in line, line


def test_a_single_value_where_a_list_goes_is_a_list_of_one(tmp_path):
    """``backends = "xnnpack"``, as the flag takes one value: not an error."""
    from pteforge.ui.config import load_config

    (tmp_path / "pteforge.toml").write_text('backends = "xnnpack"\nmodel = "tiny_models:tiny"\nmobilenet = "mobilenet_v2"\n')
    values = load_config(tmp_path / "pteforge.toml")
    assert (values["backends"], values["model"], values["mobilenet"]) == (["xnnpack"], ["tiny_models:tiny"], ["mobilenet_v2"])


def test_an_option_declared_once_is_a_flag_a_key_and_a_line_of_the_reference_and_wants_its_field(monkeypatch):
    """options.py: one new ``Option`` line gives the export's flag and help, the config-file
    key with its type and other spelling, and the CLI reference's row; its typed field in
    ``ExportConfig`` is written beside it, and until it is, the typed-config check names it."""
    import dataclasses

    from pteforge import cli
    from pteforge.core import options, spec
    from pteforge.ui import config

    new = options.Option("polish_level", ("--polish-level", "--shine"), "output", "how much to polish (default 2)",
                         options.ARTIFACT, 2, type=int, metavar="N")
    monkeypatch.setattr(options, "OPTIONS", options.OPTIONS + (new,))

    ex = cli._build_parser().export_parser
    assert "--polish-level N, --shine N" in ex.format_help() and "how much to polish" in ex.format_help()
    assert vars(ex.parse_args(["--shine", "5"]))["polish_level"] == 5
    keys = config._export_options()
    assert keys.model_validate({"shine": 7}).polish_level == 7
    with pytest.raises(Exception, match="polish_level"):
        keys.model_validate({"polish_level": "much"})
    assert "| `--polish-level --shine` | `polish-level`, `shine` | artifact: in its cache key |" in cli._make_option_table()
    declared = [o.attr for o in options.config_fields() if o.role in (options.ARTIFACT, options.RUN)]
    assert set(declared) - {f.name for f in dataclasses.fields(spec.ExportConfig)} == {"polish_level"}


def test_every_flag_of_export_is_declared_in_options():
    """The export parser has no flag besides the declared options, the families' flags and
    -c/--no-config; and ExportConfig's fields are the declared artifact and run options."""
    import dataclasses

    from pteforge import cli

    from pteforge.core import options
    from pteforge.families import families
    from pteforge.core.spec import ExportConfig

    ex = cli._build_parser().export_parser
    flags = {f for a in ex._actions for f in a.option_strings}
    declared = {f for o in options.OPTIONS for f in o.flags} | {f"--{fam.word}" for fam in families() if fam.models}
    assert flags - declared == {"-h", "--help", "-c", "--config", "--no-config", "--debug", "-q", "--quiet", "-v",
                                "--verbose", "--json"}
    assert {f.name for f in dataclasses.fields(ExportConfig)} == {
        o.attr for o in options.OPTIONS if o.role in (options.ARTIFACT, options.RUN)}


def test_worker_jobs_get_the_artifact_options_and_only_the_run_options_they_read(tmp_path):
    """What travels into a worker job is a JobConfig: every artifact option, and of the run's
    options only where to write, a child's deadline and --debug (options marked ``jobs``)."""
    import dataclasses

    from pteforge.core import spec

    config = spec.ExportConfig(out_dir=tmp_path, bench_runs=3, base_url="https://example.org/m", jobs=2, seed=7)
    job = config.for_jobs()
    held = {f.name for f in dataclasses.fields(job)}
    assert held == set(spec.ExportConfig.ARTIFACT_FIELDS) | {"out_dir", "timeout", "debug"}
    assert (job.seed, job.out_dir) == (7, tmp_path)
    for run_only in ("bench_runs", "base_url", "jobs", "executor", "ray_address", "cache", "oplist", "accuracy_budget"):
        assert not hasattr(job, run_only), run_only


TABLES = """\
weights = "none"
bench-runs = 0

[[model]]
source = "tiny_models:tiny"
input-shape = "1,3,8,8"

[[model]]
source = "tiny_models:sized"
input-shape = [1, 3, 8, 8]
"""


@pytest.mark.parametrize(
    "second, needle",
    [
        ('task = "clasification"\n', "pteforge.toml:11: [[model]] table 2: task has a wrong value: 'clasification' is "
                                     "not one of classification, detection, pose, face, segmentation (or a family's "
                                     "category: mobilenet"),
        ('fit = "squash"\n', "pteforge.toml:11: [[model]] table 2: fit has a wrong value: 'squash' is not one of crop, "
                             "letterbox, stretch (fix: use one of those values)"),
        ('# its own targets\nbackends = ["xnnpak"]\n',
         "pteforge.toml:12: [[model]] table 2: backends: unknown backend 'xnnpak'. Did you mean 'xnnpack'?"),
        ('precision = "int3"\n', "pteforge.toml:11: [[model]] table 2: precision: unknown precision 'int3'"),
        ('input-dtype = ["complex64"]\n', "pteforge.toml:11: [[model]] table 2: input-dtype: unsupported --input-dtype"),
        ('seed = 3\n', "pteforge.toml:11: [[model]] table 2: seed is not a key of a model table"),
        ('input-shap = [1, 3, 8, 8]\n', "pteforge.toml:11: [[model]] table 2: input-shap is not a key of a model table; "
                                        "did you mean input-shape?"),
        ('mean = [1, 2]\n', "pteforge.toml:11: [[model]] table 2: mean has a wrong value"),
    ],
)
def test_errors_in_a_model_table_name_the_line_of_its_key(capsys, tmp_path, second, needle):
    """What is wrong in a [[model]] table, found by the file's schema, its choices, or only
    by the export itself (backends, precisions, dtypes): the line of the key in that table."""
    (tmp_path / "pteforge.toml").write_text(TABLES + second)
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--dry-run")
    assert code == ExitStatus.USAGE, err
    [line] = error_lines(err)
    assert needle in line and "(fix: " in line, line
    assert line.startswith(f"error: {tmp_path / 'pteforge.toml'}:"), line


def test_two_model_tables_of_one_name_are_told_to_add_a_name(capsys, tmp_path):
    twice = TABLES.replace("tiny_models:sized", "tiny_models:tiny").replace("[1, 3, 8, 8]", "[1, 3, 16, 16]")
    (tmp_path / "pteforge.toml").write_text(twice)
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--dry-run")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert (f"{tmp_path / 'pteforge.toml'}:8: [[model]] tables 1 and 2 are both named 'tiny'; one model would "
            'overwrite the other\'s files (fix: add name = "tiny_2" (or another name) to [[model]] table 2)') in line, line
    # with a name of its own, both export
    (tmp_path / "pteforge.toml").write_text(twice + 'name = "tiny16"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--dry-run")
    assert code == ExitStatus.OK, err
    # the same table twice is one model, as the same --model twice
    (tmp_path / "pteforge.toml").write_text(TABLES.replace("tiny_models:sized", "tiny_models:tiny"))
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--dry-run")
    assert code == ExitStatus.OK, err


def test_model_tables_in_pyproject_name_the_pyprojects_lines(capsys, tmp_path):
    body = TABLES.replace("[[model]]", "[[tool.pteforge.model]]")
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "app"\ntask = "x"\n\n[tool.pteforge]\n{body}task = "detecton"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pyproject.toml", "--dry-run")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert (f"{tmp_path / 'pyproject.toml'}:16: [[tool.pteforge.model]] table 2: task has a wrong value: 'detecton' "
            "is not one of classification") in line and "did you mean detection?" in line, line
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "app"\n\n[tool.pteforge]\n{body}input-shape = [1, 3,\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pyproject.toml", "--dry-run")
    [line] = error_lines(err)
    assert code == ExitStatus.USAGE and f"{tmp_path / 'pyproject.toml'}:15: not valid TOML" in line, line


def test_inline_model_tables_name_the_line_of_model(capsys, tmp_path):
    (tmp_path / "pteforge.toml").write_text('weights = "none"\nmodel = [\n  {source = "tiny_models:tiny", '
                                            'input-shape = "1,3,8,8"},\n  {source = "tiny_models:tiny", fit = "x"},\n]\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--dry-run")
    [line] = error_lines(err)
    assert code == ExitStatus.USAGE and "pteforge.toml:2: [[model]] table 2: fit has a wrong value" in line, line
