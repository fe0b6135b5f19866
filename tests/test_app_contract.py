"""The executorch_flutter app reads every manifest pteforge writes (tests/flutter_app.py is
its parser, ported with Dart's casts), and ``publish`` lays out what it fetches."""

import copy
import hashlib
import json

import pytest
from flutter_app import CURRENT, OLD, CastError, ModelIndex, ModelVersions, assert_app_reads, build_models, parse_both
from test_cli import TINY, cli, error_lines

from pteforge.core.errors import ExitStatus

TARGETS = ["xnnpack", "xnnpack:int8", "portable", "coreml", "ethos-u55", "ethos-u85", "tosa"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("app")
    assert main([*TINY, "--backends", *TARGETS, "--out", str(out), "--no-verify"]) == 0
    assert main(["export", "--labels", "--out", str(out)]) == 0  # a second run merges labels in
    return out


def test_both_parsers_read_it_and_keys_are_unique(run):
    parsed = assert_app_reads(run / "index.json")
    models = parsed[CURRENT].models
    keys = {f"{m.modelName}_{m.backend}": m for m in models}
    loaded = ["xnnpack", "xnnpack:int8", "portable", "coreml"]  # what the app's builds link (backends.base.APP_LOADS)
    assert len(keys) == len(models) == len(loaded), "one app entry per requested target the app loads"
    # the canonical target keeps the bare model name; variants add their slug
    assert {"tiny_xnnpack", "tiny_portable", "tiny_coreml"} <= set(keys)
    assert keys["tiny_xnnpack_int8_xnnpack"].backend == "xnnpack", "a variant still maps to its backend"
    held = {e["target"]: e for e in json.loads((run / "index.json").read_text())["notForApp"]}
    assert set(held) == {"ethos-u55", "ethos-u85", "tosa"}, "microcontroller and NPU programs: not offered"
    assert held["tosa"]["name"] == "tiny_tosa.pte" and held["ethos-u55"]["platforms"] == []


def test_references_nobody_asked_for_stay_out_of_models(run):
    """A device-only reduced program (coreml fp16, tosa int8 on the simulator) brings no fp32
    program: its size would be measured against the model's weights at fp32, but tiny's are
    1.3 kB, less than the program around them: no ratio (test_reports sizes a weightier one).
    xnnpack:int8 is timed against xnnpack, asked for here: no reference to add either."""
    manifest = json.loads((run / "index.json").read_text())
    assert manifest["references"] == []
    entries = {e["target"]: e for e in [*manifest["models"], *manifest["notForApp"], *manifest["outOfBudget"]]}
    for target in ("coreml", "tosa"):
        assert entries[target].get("relative") is None, target
    assert entries["xnnpack:int8"]["relative"]["fp32"] == "tiny_xnnpack.pte"


def test_labels_in_the_apps_shape(run):
    index = ModelIndex.from_json(json.loads((run / "index.json").read_text()), OLD)
    labels = {lab.category: lab for lab in index.labels}
    from pteforge.families import families

    assert set(labels) == {f.category for f in families() if f.labels_file}, "--labels: every family's file"
    for lab in labels.values():
        data = (run / lab.remoteUrl).read_bytes()
        assert lab.size == len(data) and lab.hash == hashlib.sha256(data).hexdigest()
    assert labels["mobilenet"].name == "imagenet_classes.txt" and labels["yolo"].name == "coco_classes.txt"


def test_platforms_and_backends_in_the_apps_words(run):
    index = ModelIndex.from_json(json.loads((run / "index.json").read_text()), CURRENT)
    by_target = {e["target"]: e for e in json.loads((run / "index.json").read_text())["models"]}
    assert "ethos-u55" not in by_target, "the app links no Ethos-U delegate: not offered on any platform"
    assert by_target["coreml"]["platforms"] == ["ios", "macos"]
    # custom models: the app parses them and shows none (its registry drops unknown categories)
    assert index.models and build_models(index, "linux") == []


def test_manifest_check_says_what_the_app_would_reject(capsys, run, tmp_path):
    code, stdout, _ = cli(capsys, "manifest", "check", run / "index.json")
    assert code == ExitStatus.OK and "read by the executorch_flutter app" in stdout
    manifest = json.loads((run / "index.json").read_text())
    for mutate, needle in (
        (lambda m: m["labels"][0].pop("category"), "the executorch_flutter app would reject this: labels[0] has no category"),
        (lambda m: m["models"][0].update(size=float(m["models"][0]["size"])),
         f"{manifest['models'][0]['file'].rsplit('/', 1)[-1]} size is float, the app reads int"),
        (lambda m: m.pop("backends"), "the older executorch_flutter app would reject this: has no backends"),
        (lambda m: m["labels"][1].pop("hash"), "the older executorch_flutter app would reject this: labels[1] has no hash"),
    ):
        broken = copy.deepcopy(manifest)
        mutate(broken)
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(CastError):  # the app's parsers throw on it too
            for parser in (CURRENT, OLD):
                ModelIndex.from_json(broken, parser)
        code, _, err = cli(capsys, "manifest", "check", path)
        assert code == ExitStatus.MANIFEST
        [line] = error_lines(err)
        assert needle in line, line


def test_manifest_check_notes_what_the_app_reads_but_may_not_show(capsys, run, tmp_path):
    manifest = json.loads((run / "index.json").read_text())
    models = manifest["models"]
    _, stdout, _ = cli(capsys, "manifest", "check", run / "index.json")
    names = [m["file"].rsplit("/", 1)[-1] for m in models]
    notes = {line.split(".pte ", 1)[1]: line for line in stdout.splitlines() if line.startswith("  note: ")}

    def at(pick):  # the entries a note names, by their file names
        return "note: " + ", ".join(n for n, m in zip(names, models) if pick(m)) + " "

    everything = at(lambda m: True)
    assert ".pte, " in everything and "models[" not in stdout
    assert everything in notes["have category 'custom': the app shows only mobilenet, yolo, movenet, blazeface, "
                               "yolo-pose, yolo-face"]
    assert everything in notes["have a relative remoteUrl: the app downloads remoteUrl as it is "
                               "(export or publish with --base-url)"]
    unknown = {m["backend"] for m in models} - {"xnnpack", "coreml"}
    assert unknown == {"portable"}  # arm and tosa programs are not offered (notForApp)
    for backend in unknown:
        [text] = [t for t in notes if t.startswith(f"have backend '{backend}', not one the app knows")]
        assert at(lambda m, b=backend: m["backend"] == b) in notes[text]
        assert ("need no delegate" in text) == (backend == "portable"), text
    assert not any("share the app's key" in t for t in notes)

    twice = copy.deepcopy(manifest)
    twice["models"].append(copy.deepcopy(twice["models"][0]))
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(twice))
    _, stdout, _ = cli(capsys, "manifest", "check", path)
    key = f"{models[0]['modelName']}_{models[0]['backend']}"
    assert f"  note: {names[0]} share the app's key {key} with {names[0]}: the app keeps one of them" in stdout


def test_publish_lays_out_what_the_app_fetches(capsys, run, tmp_path):
    site = tmp_path / "site"
    code, stdout, err = cli(capsys, "publish", run, "--site", site, "--base-url", "https://models.example.org/pte")
    assert code == ExitStatus.OK, err
    versions = ModelVersions.from_json(json.loads((site / "versions.json").read_text()))
    # made with 1.5.1: the runtimes of 1.5.x and the next minor release load it (the app's
    # 0.8.x releases ask for 1.5.0, its 0.9.x for 1.6.0)
    assert versions.versions == ["1.5.0", "1.5.1", "1.6.0"] and versions.latest == "1.6.0", stdout
    for version in versions.versions:
        index = assert_app_reads(site / version / "index.json")[CURRENT]
        for m in index.models:
            assert m.remoteUrl == f"https://models.example.org/pte/{version}/custom/{m.name}"
            assert hashlib.sha256((site / version / "custom" / m.name).read_bytes()).hexdigest() == m.hash
        assert all(lab.remoteUrl.startswith(f"https://models.example.org/pte/{version}/") for lab in index.labels)
    assert not [p for p in site.rglob("*") if p.name.endswith((".lock", ".tmp", ".old"))], "nothing but the site"

    # one runtime chosen, republished: the others are kept, latest is the newest
    assert cli(capsys, "publish", run, "--site", site, "--runtime", "1.5.1", "--relative")[0] == ExitStatus.OK
    versions = ModelVersions.from_json(json.loads((site / "versions.json").read_text()))
    assert versions.versions == ["1.5.0", "1.5.1", "1.6.0"] and versions.latest == "1.6.0"
    assert assert_app_reads(site / "1.5.1" / "index.json")[CURRENT].models[0].remoteUrl.startswith("custom/")
    assert assert_app_reads(site / "1.6.0" / "index.json")[CURRENT].models[0].remoteUrl.startswith("https://")

    # republishing a version merges: entries of that version from elsewhere are kept
    index = assert_app_reads(site / "1.6.0" / "index.json")[CURRENT]
    other = tmp_path / "other"
    assert cli(capsys, *TINY, "--backends", "xnnpack", "--seed", "3", "--no-verify", "--out", other)[0] == ExitStatus.OK
    assert cli(capsys, "publish", other, "--site", site, "--base-url", "https://models.example.org/pte")[0] == ExitStatus.OK
    merged = assert_app_reads(site / "1.6.0" / "index.json")[CURRENT]
    assert len(merged.models) == len(index.models), "the new tiny_xnnpack replaced the old one; the rest kept"
    new = next(m for m in merged.models if m.name == "tiny_xnnpack.pte")
    assert new.hash == json.loads((other / "index.json").read_text())["models"][0]["hash"]
    assert not [p for p in site.rglob("*") if p.name.endswith((".lock", ".tmp", ".old"))], "nothing half-built left"
    assert not [p for p in other.rglob("*") if p.name.endswith(".lock")], "no lock file among the artifacts"


@pytest.mark.parametrize("runtime", ["1.4.0", "1.7.0", "2.5.1", "1.6"])
def test_publish_refuses_a_runtime_the_policy_rules_out(capsys, run, tmp_path, runtime):
    site = tmp_path / "site"
    code, _, err = cli(capsys, "publish", run, "--site", site, "--base-url", "https://x.org", "--runtime", "1.5.0", runtime)
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert f"--runtime {runtime}" in line and ("compatibility policy" in line or "MAJOR.MINOR.PATCH" in line), line
    assert not site.exists(), "nothing written"


def test_the_runtimes_of_artifacts_made_with_a_build_that_is_not_a_release():
    """A nightly or a source build has no policy to apply: the runtimes must be named."""
    from pteforge.core.errors import UsageError
    from pteforge.app.publish import runtimes_for

    assert runtimes_for("1.5.1+cpu") == ["1.5.0", "1.5.1", "1.6.0"]
    assert runtimes_for("1.6.0.dev20261101", ["1.6.0", "1.5.1"]) == ["1.5.1", "1.6.0"]
    with pytest.raises(UsageError) as refused:
        runtimes_for("1.6.0.dev20261101")
    assert "--runtime V" in refused.value.one_line()
    with pytest.raises(UsageError, match="compatibility policy"):
        runtimes_for("1.5.1", ["1.5.1", "1.7.0"])


def test_publish_without_a_base_url_is_refused_unless_relative(capsys, run, tmp_path):
    site = tmp_path / "site"
    code, _, err = cli(capsys, "publish", run, "--site", site)
    assert code == ExitStatus.USAGE and "--relative" in error_lines(err)[0]
    assert not site.exists()
    code, _, err = cli(capsys, *TINY, "--backends", "portable", "--out", tmp_path / "o", "--publish", site)
    assert code == ExitStatus.USAGE and "--publish-relative" in error_lines(err)[0]
    assert not (tmp_path / "o").exists() and not site.exists(), "refused before the export"
    code, _, err = cli(capsys, *TINY, "--backends", "portable", "--out", tmp_path / "o", "--publish", site,
                       "--publish-base-url", "https://x.org", "--publish-runtime", "1.9.0")
    assert code == ExitStatus.USAGE and "--publish-runtime 1.9.0" in error_lines(err)[0]
    assert not (tmp_path / "o").exists()
    code, _, err = cli(capsys, "publish", run, "--site", site, "--relative")
    assert code == ExitStatus.OK and "relative" in err
    assert ModelVersions.from_json(json.loads((site / "versions.json").read_text())).latest == "1.6.0"


def test_publish_refuses_a_versions_file_it_does_not_know(capsys, run, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "versions.json").write_text('{"latest": 3}')
    code, _, err = cli(capsys, "publish", run, "--site", site, "--relative")
    assert code == ExitStatus.MANIFEST
    assert "is not a versions file" in error_lines(err)[0]
    assert (site / "versions.json").read_text() == '{"latest": 3}'


def test_the_port_is_as_strict_as_dart(run):
    """Dart's `as int` refuses 5.0 and null; `as String?` takes null."""
    manifest = json.loads((run / "index.json").read_text())
    parse_both(manifest)
    for field, value in (("size", 5.0), ("size", None), ("name", 3), ("platforms", "android")):
        broken = copy.deepcopy(manifest)
        broken["models"][0][field] = value
        with pytest.raises(CastError):
            ModelIndex.from_json(broken, CURRENT)
    fine = copy.deepcopy(manifest)
    fine["models"][0]["hash"] = None
    ModelIndex.from_json(fine, CURRENT)
    with pytest.raises(CastError):
        ModelIndex.from_json(fine, OLD)
