"""``publish`` and ``validate`` from the command line (issue #70, items 3 and 4): every
command's ``--json`` is one JSON document; publish takes an export's index.json or its
directory; several exports published into one site keep every list of each (references
included); a base URL given at export is publish's default; validate writes nothing into a
published site, and says where its report went."""

import json
import os
import re
from pathlib import Path

import pytest
from flutter_app import CURRENT, assert_app_reads
from test_cli import TINY, cli, error_lines

from pteforge.core.errors import ExitStatus
from pteforge.report.manifest import ENTRY_LISTS

EXPORT_URL = "https://cdn.example.org/zoo"  # alpha's export --base-url
SITE_URL = "https://models.example.org/pte"


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, Path]:
    """Two exports, each an fp16 artifact and the fp32 reference it is measured against
    (``references``); alpha's with ``--base-url`` (its manifest records a baseUrl), and
    published from the export itself (``--publish``, no --publish-base-url). And gamma, one
    portable file (what validate runs). A few seconds each once the first has warmed up."""
    from pteforge.cli import main

    root = tmp_path_factory.mktemp("publish-cli")
    made = {name: root / name for name in ("alpha", "beta", "gamma")}
    extra = {"alpha": ["--backends", "xnnpack:fp16", "--base-url", EXPORT_URL, "--publish", str(root / "from-export")],
             "beta": ["--backends", "xnnpack:fp16"], "gamma": ["--backends", "portable"]}
    for name, out in made.items():
        assert main([*TINY, *extra[name], "--no-verify", "--name", name, "--out", str(out)]) == ExitStatus.OK
    for name in ("alpha", "beta"):
        manifest = json.loads((made[name] / "index.json").read_text())
        assert [e["name"] for e in manifest["references"]] == [f"{name}_xnnpack.pte"], "an fp32 reference each"
    made["from-export"] = root / "from-export"
    return made


def versions_of(site: Path) -> list[str]:
    return json.loads((site / "versions.json").read_text())["versions"]


def listed(index: Path) -> dict[str, set[str]]:
    manifest = json.loads(index.read_text())
    return {key: {e["name"] for e in manifest[key]} for key in ENTRY_LISTS}


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(root.rglob("*"))}


def made_with(out: Path) -> str:
    [version] = {e["versions"]["executorch"] for e in json.loads((out / "index.json").read_text())["models"]}
    return version


def test_publish_json_is_one_document(capsys, exports, tmp_path):
    site = tmp_path / "site"
    code, stdout, err = cli(capsys, "publish", exports["beta"], "--site", site, "--base-url", SITE_URL, "--json")
    assert code == ExitStatus.OK, err
    doc = json.loads(stdout)  # all of stdout: one document
    assert doc["versions"] == versions_of(site) and doc["latest"] == doc["versions"][-1]
    assert doc["baseUrl"] == SITE_URL and doc["baseUrlFrom"] == "--base-url" and doc["files"] == 2
    assert doc["manifest"] == str(exports["beta"] / "index.json") and doc["runtimes"] == doc["versions"]
    assert [Path(p) for p in doc["indexes"]] == [site / v / "index.json" for v in doc["runtimes"]]
    assert all(Path(p).is_file() for p in doc["indexes"])
    # refused: one document too, the line on stderr
    code, stdout, err = cli(capsys, "publish", exports["beta"], "--site", tmp_path / "other", "--json")
    assert code == ExitStatus.USAGE and json.loads(stdout)["exitCode"] == ExitStatus.USAGE
    assert len(error_lines(err)) == 1 and not (tmp_path / "other").exists()


def test_publish_takes_the_manifest_file_or_its_directory(capsys, exports, tmp_path):
    by_file, by_dir = tmp_path / "by-file", tmp_path / "by-dir"
    for given, site in ((exports["beta"] / "index.json", by_file), (exports["beta"], by_dir)):
        code, _, err = cli(capsys, "publish", given, "--site", site, "--base-url", SITE_URL)
        assert code == ExitStatus.OK, err
    strip = re.compile(rb'"generated": "[^"]*"')
    assert {k: strip.sub(b"", v) for k, v in tree(by_file).items()} == {k: strip.sub(b"", v) for k, v in tree(by_dir).items()}
    # a manifest that is not there is named as given, never <given>/index.json
    missing = tmp_path / "zoo" / "index.json"
    code, _, err = cli(capsys, "publish", missing, "--site", tmp_path / "s", "--base-url", SITE_URL)
    [line] = error_lines(err)
    assert code == ExitStatus.USAGE and f"no manifest at {missing} " in line and "index.json/index.json" not in line


def test_two_exports_into_one_site_keep_every_list(capsys, exports, tmp_path):
    site = tmp_path / "site"
    for name in ("alpha", "beta", "alpha"):  # alpha again: replaced, never listed twice
        code, _, err = cli(capsys, "publish", exports[name], "--site", site, "--base-url", SITE_URL)
        assert code == ExitStatus.OK, err
    for version in versions_of(site):
        index = site / version / "index.json"
        lists = listed(index)
        assert lists["references"] == {"alpha_xnnpack.pte", "beta_xnnpack.pte"}, "both exports' fp32 references"
        assert lists["models"] == {"alpha_xnnpack_fp16.pte", "beta_xnnpack_fp16.pte"}
        manifest = json.loads(index.read_text())
        assert len(manifest["models"]) + len(manifest["references"]) == 4, "nothing listed twice"
        files = {p.name for p in (site / version).rglob("*.pte")}
        assert files == set().union(*lists.values()), "every file the version holds is listed"
        for entry in manifest["models"] + manifest["references"]:
            assert entry["remoteUrl"] == f"{SITE_URL}/{version}/{entry['file']}"
        assert {m.name for m in assert_app_reads(index)[CURRENT].models} == lists["models"]
        code, stdout, err = cli(capsys, "manifest", "check", index, "--json")
        assert code == ExitStatus.OK and json.loads(stdout)["references"] == 2, err


def test_the_base_url_given_at_export_is_publishs_default(capsys, exports, tmp_path):
    site = tmp_path / "site"
    code, _, err = cli(capsys, "publish", exports["alpha"], "--site", site)
    assert code == ExitStatus.OK, err
    assert f"remoteUrl under {EXPORT_URL}/<version>/" in err and "warning" not in err
    for version in versions_of(site):
        manifest = json.loads((site / version / "index.json").read_text())
        assert manifest["baseUrl"] == f"{EXPORT_URL}/{version}"
        for entry in manifest["models"] + manifest["references"]:
            assert entry["remoteUrl"] == f"{EXPORT_URL}/{version}/{entry['file']}"
    # --base-url still wins, --relative still keeps them relative
    assert cli(capsys, "publish", exports["alpha"], "--site", site, "--base-url", SITE_URL)[0] == ExitStatus.OK
    assert json.loads((site / versions_of(site)[0] / "index.json").read_text())["models"][0]["remoteUrl"].startswith(SITE_URL)
    assert cli(capsys, "publish", exports["alpha"], "--site", tmp_path / "rel", "--relative")[0] == ExitStatus.OK
    rel = json.loads((tmp_path / "rel" / versions_of(site)[0] / "index.json").read_text())
    assert rel["models"][0]["remoteUrl"] == rel["models"][0]["file"]
    # export --base-url --publish SITE (no --publish-base-url): published under the export's URL
    published = exports["from-export"]
    for version in versions_of(published):
        entry = json.loads((published / version / "index.json").read_text())["references"][0]
        assert entry["remoteUrl"] == f"{EXPORT_URL}/{version}/{entry['file']}"


def test_publish_without_any_base_url_says_truly_why(capsys, exports, tmp_path):
    code, _, err = cli(capsys, "publish", exports["beta"], "--site", tmp_path / "site")
    [line] = error_lines(err)
    assert code == ExitStatus.USAGE and not (tmp_path / "site").exists()
    assert f"{exports['beta'] / 'index.json'} records none" in line and "relative path (e.g. custom/" in line, line
    assert "--relative" in line and "a relative one does not download" not in line


def test_validate_writes_nothing_into_a_published_site(capsys, exports, tmp_path):
    site = tmp_path / "site"
    version = made_with(exports["gamma"])
    code, _, err = cli(capsys, "publish", exports["gamma"], "--site", site, "--relative", "--runtime", version)
    assert code == ExitStatus.OK, err
    before = tree(site)
    # into the site, asked for: refused before any work, the site untouched
    for args in (("--output-file", site / "report.json"), ("--draw", site / "drawn")):
        code, _, err = cli(capsys, "validate", site, *args)
        [line] = error_lines(err)
        assert code == ExitStatus.USAGE and f"{args[1]} is inside {site.resolve()}, a published site" in line, line
    assert tree(site) == before
    # a version directory (with its index.json, where report.html had been rewritten) and the
    # site itself: the report goes to the cache, and the output says where
    code, stdout, err = cli(capsys, "validate", site / version, "--draw")
    assert code == ExitStatus.OK, stdout + err
    assert tree(site) == before, "not one byte written into the site"
    cache = Path(os.environ["PTEFORGE_CACHE_DIR"])
    [report] = (cache / "validation").glob("*/validation_report.json")
    assert "which validate only reads" in err and str(report) in err and "nothing written into the site" in err
    assert str(report) in stdout
    files = json.loads(report.read_text())["files"]
    assert [Path(f["file"]).name for f in files] == ["gamma_portable.pte"]
    assert "report.html" not in stdout and not list(site.rglob("report.html"))


def test_every_cheap_command_prints_one_json_document(capsys, exports, tmp_path):
    index = exports["beta"] / "index.json"
    for args, check in (
        (("backends",), lambda d: "xnnpack" in {b["name"] for b in d}),
        (("models",), lambda d: "mobilenet_v3_small" in {m["name"] for m in d}),
        (("cache", "info"), lambda d: "artifacts" in d and "directory" in d),
        (("cache", "clear"), lambda d: "removed" in d),
        (("select", index, "beta", "--platform", "android"), lambda d: d["selected"] == "beta_xnnpack_fp16.pte"),
        (("manifest", "check", index), lambda d: d["valid"] and d["references"] == 1),
        (("manifest", "schema"), lambda d: "properties" in d),
        (("docs", "--out", tmp_path / "docs"), lambda d: str(tmp_path / "docs" / "cli.md") in d["wrote"]),
        (("publish", index, "--site", tmp_path / "site", "--relative"), lambda d: d["baseUrl"] == "" and d["files"] == 2),
    ):
        code, stdout, err = cli(capsys, *args, "--json")
        assert code == ExitStatus.OK, (args, err[-300:])
        assert check(json.loads(stdout)), (args, stdout[:300])
    code, stdout, err = cli(capsys, "select", tmp_path / "none.json", "beta", "--json")
    assert code != ExitStatus.OK and json.loads(stdout)["exitCode"] == code and len(error_lines(err)) == 1
