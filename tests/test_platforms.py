"""Platform targets, run-time selection with fallback, and the manifest as a contract."""

import json
from pathlib import Path

import pytest
from test_cli import TINY, cli, error_lines

from pteforge.core.errors import ExitStatus

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """One model with coreml and vulkan (fp16 both: device-only, so no fp32 reference) and xnnpack artifacts."""
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("three")
    assert main([*TINY, "--backends", "coreml", "vulkan", "xnnpack", "--out", str(out)]) == 0
    return out


def test_target_android_exports_what_lowers_and_lists_the_rest(capsys, out):
    code, stdout, err = cli(capsys, *TINY, "--target", "android", "--out", out)
    assert code == ExitStatus.OK, "a platform's backends that cannot lower here do not fail the run"
    assert "qnn" in err and "QNN_SDK_ROOT" in err
    manifest = json.loads((out / "index.json").read_text())
    assert {e["target"] for e in manifest["models"]} == {"vulkan", "xnnpack"}
    assert manifest["fallback"]["tiny"]["android"] == ["tiny_vulkan.pte", "tiny_xnnpack.pte"]
    assert manifest["fallback"]["tiny"]["web"] == ["tiny_xnnpack.pte"]


def test_named_unavailable_backend_still_fails_the_run(capsys, out):
    code, _, _ = cli(capsys, *TINY, "--target", "web", "--backends", "qnn", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED


def test_load_best_falls_back_to_what_this_runtime_runs(three):
    from pteforge import load_best

    sel = load_best(three / "index.json", "tiny")  # this host: a desktop's order
    assert sel.entry.name == "tiny_xnnpack.pte" and sel.program is not None
    assert dict(sel.skipped) == {"tiny_vulkan.pte": "VulkanBackend is not registered in this runtime"}
    sel = load_best(three / "index.json", "tiny", platform="all")
    assert sel.entry.name == "tiny_xnnpack.pte" and sel.program is not None
    # coreml:fp32, the reference of coreml (fp16), is not an app candidate: nobody asked for it
    assert dict(sel.skipped) == {
        "tiny_coreml.pte": "CoreMLBackend is not registered in this runtime",
        "tiny_vulkan.pte": "VulkanBackend is not registered in this runtime",
    }
    import torch

    out = sel.program.load_method("forward").execute([torch.rand(1, 3, 16, 16)])
    assert out[0].shape == (1, 10)


def test_load_best_skips_an_altered_file(three, tmp_path):
    import shutil

    from pteforge import load_best

    d = tmp_path / "m"
    shutil.copytree(three, d)
    data = bytearray((d / "custom" / "tiny_xnnpack.pte").read_bytes())
    data[-10] ^= 0xFF
    (d / "custom" / "tiny_xnnpack.pte").write_bytes(bytes(data))
    sel = load_best(d, "tiny", platform="desktop")
    assert sel.entry is None and sel.program is None
    assert dict(sel.skipped)["tiny_xnnpack.pte"] == \
        "file custom/tiny_xnnpack.pte differs from its manifest entry (another sha256, the same size)"


def test_select_prints_the_same_decision(capsys, three, tmp_path):
    """The manifest is select's first name, an index.json or its directory, as ``validate
    DIR`` and ``bench DIR`` take theirs (it was "unrecognized arguments"); --manifest too."""
    code, stdout, _ = cli(capsys, "select", three, "--platform", "android", "tiny")
    assert code == ExitStatus.OK
    # for an Android device: its order and its delegates, not this Linux host's (which has no Vulkan)
    assert "for a device of platform android (its own delegates; not loaded here): try tiny_vulkan.pte" in stdout
    assert "→ tiny_vulkan.pte" in stdout and "skip" not in stdout
    assert "coreml" not in stdout, "iOS artifacts are not candidates on Android"
    # without --platform: this host, whose answer is the report's recommendation
    from pteforge.report.manifest import load_manifest
    from pteforge.report.summary import recommendation

    code, stdout, _ = cli(capsys, "select", three, "tiny")
    assert code == ExitStatus.OK and "for this host (its platform's order, loaded here)" in stdout
    assert "skip tiny_vulkan.pte: VulkanBackend is not registered in this runtime" in stdout
    assert f"→ {recommendation(load_manifest(three / 'index.json'), 'tiny').name}" in stdout
    for args, said in ((["a", "b", "c"], "select takes a manifest and a model, not 3 names"),
                       ([three, "tiny", "--manifest", tmp_path], f"two manifests: {three} and --manifest {tmp_path}")):
        code, _, err = cli(capsys, "select", *args)
        assert code == ExitStatus.USAGE and said in error_lines(err)[0], err


@pytest.mark.slow  # over 20 s: the fast subset stays under 10 minutes
def test_select_for_a_desktop_names_its_os_and_leaves_out_what_it_cannot_load(capsys, three):
    """``--platform macos`` was refused ("did you mean 'ios'?" for windows) though the rows
    say "run it on a device: macos"; a desktop device by its OS walks desktop's order over
    the artifacts that OS loads (Core ML on a Mac, not on Linux), and this Linux host's
    order leaves out what only a Mac loads."""
    code, stdout, _ = cli(capsys, "select", three, "tiny", "--platform", "macos")
    assert code == ExitStatus.OK and "for a device of platform macos" in stdout and "tiny_coreml.pte" in stdout
    for os in ("linux", "windows"):
        code, stdout, _ = cli(capsys, "select", three, "tiny", "--platform", os)
        assert code == ExitStatus.OK and "try tiny_vulkan.pte, tiny_xnnpack.pte" in stdout and "coreml" not in stdout
    code, stdout, _ = cli(capsys, "select", three, "tiny")
    assert code == ExitStatus.OK and "coreml" not in stdout, "a Linux host does not try what only a Mac loads"
    code, _, err = cli(capsys, "select", three, "tiny", "--platform", "windws")
    assert code == ExitStatus.USAGE and "did you mean 'windows'?" in error_lines(err)[0], err


def test_select_with_the_manifest_alone_takes_its_one_model(capsys, three, tmp_path):
    """``select DIR`` was read as a model named DIR in models/index.json ("no manifest")."""
    code, stdout, _ = cli(capsys, "select", three, "--platform", "android")
    assert code == ExitStatus.OK and "→ tiny_vulkan.pte" in stdout
    two = tmp_path / "two"
    two.mkdir()
    doc = json.loads((three / "index.json").read_text())
    other = {**doc["models"][0], "model": "other", "modelName": "other"}
    (two / "index.json").write_text(json.dumps({**doc, "models": [*doc["models"], other]}))
    code, _, err = cli(capsys, "select", two / "index.json")
    assert code == ExitStatus.USAGE
    assert f"name the model too; {two / 'index.json'} lists other, tiny" in error_lines(err)[0], err


def test_manifest_check_says_which_listed_files_call_kernels_the_app_does_not_link(capsys, three, tmp_path):
    """A manifest written before pteforge held these files back (or edited by hand) lists a
    program whose kernels no build of the app links: check says it fails to load there."""
    doc = json.loads((three / "index.json").read_text())
    doc["models"][0]["delegation"]["kernels"] = ["aten::add.out", "llama::update_cache.out"]
    (tmp_path / "index.json").write_text(json.dumps(doc))
    code, stdout, _ = cli(capsys, "manifest", "check", tmp_path / "index.json")
    assert code == ExitStatus.OK, stdout
    note = next(line for line in stdout.splitlines() if "fail to load in the app" in line)
    assert doc["models"][0]["name"] in note and "they call llama::update_cache.out, which no build of the app links" in note


def test_select_unknown_model(capsys, three):
    code, _, err = cli(capsys, "select", "--manifest", three / "index.json", "tiny2")
    assert code == ExitStatus.USAGE
    assert "Did you mean 'tiny'?" in error_lines(err)[0]


def test_manifest_check(capsys, three, tmp_path):
    code, stdout, _ = cli(capsys, "manifest", "check", three / "index.json")
    assert code == ExitStatus.OK and "valid pteforge manifest (schema_version 2), read by the executorch_flutter app" in stdout
    assert "3 artifact(s) for the app, 0 reference(s), 0 out of budget, 0 not loaded by the app on any platform, 0 failed" in stdout
    assert "web sees: " in stdout and "android sees: " in stdout
    bad = tmp_path / "index.json"
    doc = json.loads((three / "index.json").read_text())
    doc["models"][0]["size"] = "big"
    bad.write_text(json.dumps(doc))
    code, _, err = cli(capsys, "manifest", "check", bad)
    assert code == ExitStatus.MANIFEST and "models.0.size" in error_lines(err)[0]
    assert "(fix: compare it with `pteforge manifest schema`" in error_lines(err)[0], "not the export's 'move it away'"
    code, stdout, err = cli(capsys, "manifest", "check", three)  # an export's directory: was an internal error
    assert code == ExitStatus.OK and f"{three / 'index.json'}: valid pteforge manifest" in stdout, err


def test_committed_schema_is_current():
    from pteforge.report.manifest import Manifest

    committed = json.loads((ROOT / "schema" / "manifest.schema.json").read_text())
    assert committed == Manifest.model_json_schema(), "regenerate: pteforge manifest schema > schema/manifest.schema.json"


def test_manifest_keeps_the_flutter_client_fields_strict(three):
    """The app casts these strictly: a missing remoteUrl or a float size breaks it."""
    manifest = json.loads((three / "index.json").read_text())
    assert isinstance(manifest["version"], str) and isinstance(manifest["generated"], str)
    assert isinstance(manifest["baseUrl"], str) and isinstance(manifest["labels"], list)
    for e in manifest["models"]:
        for key, typ in {"name": str, "modelName": str, "category": str, "backend": str, "hash": str,
                         "size": int, "sizeMB": float, "remoteUrl": str, "platforms": list}.items():
            assert isinstance(e[key], typ), key
        # one unit everywhere: MB of 10^6 bytes, as the reports print it (it was MiB: 5.23 where they said 5.48 MB)
        assert e["sizeMB"] == round(e["size"] / 1e6, 2)
    summary = (three / "EXPORT_SUMMARY.md").read_text()
    from pteforge.core.units import size_text

    assert all(f"| {size_text(e['size'])} |" in summary for e in manifest["models"]), summary
