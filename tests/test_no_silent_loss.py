"""Bad input never loses, overwrites or silently ignores anything (issue: nothing silently lost)."""

import json
import os
import stat

import pytest
from test_cli import TINY, cli, error_lines

from pteforge.core.errors import ExitStatus, ManifestError, one_line


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("earlier")
    assert main([*TINY, "--backends", "portable", "--out", str(out)]) == 0
    return out


def write_junk(directory, names=("notes.txt", "broken.jpg")):
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"this is not an image")
    return directory


def test_validate_refuses_an_images_dir_without_a_readable_image(capsys, earlier, tmp_path):
    junk = write_junk(tmp_path / "photos")
    code, stdout, err = cli(capsys, "validate", "--models-dir", earlier, "--images-dir", junk)
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "none of its 2 file(s) is a readable image (broken.jpg, notes.txt)" in line
    assert "VERIFIED" not in stdout


def test_unreadable_images_are_named_and_readable_ones_used(tmp_path):
    from PIL import Image

    from pteforge.families.vision import image_dir

    photos = write_junk(tmp_path / "photos", ("broken.png",))
    Image.new("RGB", (8, 8), (200, 10, 10)).save(photos / "red.png")
    good, note = image_dir(photos, "--images-dir")
    assert [p.name for p in good] == ["red.png"]
    assert note == f"--images-dir {photos}: skipping 1 file(s) that are not readable images: broken.png"


def test_unreadable_images_are_named_after_ultralytics_patches_pil(tmp_path):
    """Ultralytics replaces PIL.Image.open, for every caller in the process, with one that
    tries to pip-install a HEIF plugin when a file does not decode; in a fresh process with
    that patch applied, the scan still names the broken file and makes no install."""
    import subprocess
    import sys

    from PIL import Image

    photos = write_junk(tmp_path / "photos", ("broken.png",))
    Image.new("RGB", (8, 8), (200, 10, 10)).save(photos / "red.png")
    code = (
        "import sys, PIL.Image\n"
        "from pteforge.models import ultralytics_models\n"
        "import ultralytics.utils.patches\n"
        "assert PIL.Image.open.__module__ == 'ultralytics.utils.patches'\n"
        "from pteforge.families.vision import scan_images\n"
        "good, bad = scan_images(sys.argv[1])\n"
        "print([p.name for p in good], [p.name for p in bad])\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(photos)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == "['red.png'] ['broken.png']"
    assert "attempting AutoUpdate" not in run.stderr + run.stdout


def test_validate_says_when_no_photo_was_run(capsys, earlier):
    """A model whose input is not an image is checked on seeded inputs, and says so."""
    code, stdout, _ = cli(capsys, "validate", "--models-dir", earlier)
    assert code == ExitStatus.OK
    report = json.loads((earlier / "validation_report.json").read_text())
    [f] = report["files"]
    assert f["status"] == "VERIFIED" and "no photo was run" in f["reason"]


@pytest.mark.parametrize("field", ["file", "remoteUrl", "labelsFile"])
def test_manifest_paths_outside_its_directory_are_refused(capsys, earlier, tmp_path, field):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(earlier, out)
    manifest = json.loads((out / "index.json").read_text())
    manifest["models"][0][field] = "../../../../etc/hostname"
    (out / "index.json").write_text(json.dumps(manifest))
    for args in (["validate", "--models-dir", out], ["select", "tiny", "--manifest", out / "index.json"],
                 ["manifest", "check", out / "index.json"], [*TINY, "--backends", "portable", "--out", out],
                 ["bench", out]):
        code, _, err = cli(capsys, *args)
        assert code == ExitStatus.MANIFEST, (args, err)
        [line] = error_lines(err)
        assert f"models[0].{field} '../../../../etc/hostname' points outside the manifest's directory" in line

    from pteforge.report.manifest import Manifest
    from pteforge.app.selection import load_best

    with pytest.raises(ManifestError, match="points outside"):
        load_best(out / "index.json", "tiny")
    with pytest.raises(ManifestError, match="points outside"):
        load_best(Manifest.model_validate(manifest), "tiny")


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_files_are_written_with_the_users_umask(tmp_path, umask, mode):
    from pteforge.core.io import write_atomic

    old = os.umask(umask)
    try:
        write_atomic(tmp_path / "a.pte", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.pte").stat().st_mode) == mode


def test_exported_artifacts_and_reports_are_world_readable_under_umask_022(earlier):
    for name in ("custom/tiny_portable.pte", "index.json", "report.html", "EXPORT_SUMMARY.md"):
        assert stat.S_IMODE((earlier / name).stat().st_mode) & 0o044 == 0o044, name


def test_one_line_keeps_the_cause_of_a_native_error():
    """OpenVINO's errors open with where in its C++ they were raised; the cause comes after."""
    import openvino

    with pytest.raises(Exception) as info:
        openvino.Core().read_model("/nonexistent/model.xml")
    text = str(info.value)
    assert text.splitlines()[0].startswith("Exception from src/"), "the shape this test is about"
    line = one_line(info.value)
    assert "\n" not in line and "Could not open the file" in line and "/nonexistent/model.xml" in line
    assert ".cpp" not in line


def test_a_truncated_photo_is_named_and_left_out_of_calibration(tmp_path):
    """PIL's ``verify()`` passes a JPEG cut in half; calibration then failed the whole target
    ("image file is truncated"). The images a run reads are decoded whole by the scan."""
    import io

    from PIL import Image

    from pteforge.families.vision import image_dir, images_in

    photos = tmp_path / "photos"
    photos.mkdir()
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 10)).save(buffer, "JPEG")
    (photos / "a_cut.jpg").write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    Image.new("RGB", (8, 8), (200, 10, 10)).save(photos / "red.png")
    good, note = image_dir(photos, "--calibration", 16)
    assert [p.name for p in good] == ["red.png"]
    assert note == f"--calibration {photos}: skipping 1 file(s) that are not readable images: a_cut.jpg"
    assert [p.name for p in images_in(photos, 16)] == ["red.png"]


def test_calibration_takes_a_directory_per_class_in_turn(tmp_path):
    """A dataset laid out a directory per class: the first N sorted files were all of the
    first class, so int8 ranges were calibrated on one class only."""
    from PIL import Image

    from pteforge.families.vision import images_in

    for cls, count in (("cat", 5), ("dog", 2), ("fox", 3)):
        (tmp_path / cls).mkdir()
        for i in range(count):
            Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(tmp_path / cls / f"{i}.png")
    Image.new("RGB", (8, 8)).save(tmp_path / "loose.png")
    picked = [p.relative_to(tmp_path).as_posix() for p in images_in(tmp_path, 6)]
    assert picked == ["cat/0.png", "dog/0.png", "fox/0.png", "loose.png", "cat/1.png", "dog/1.png"], picked


def test_every_family_reads_a_photo_upright_and_at_8_bits(tmp_path):
    """A phone's portrait photo is stored sideways with an EXIF orientation, and a PNG may
    hold 16 bits per channel. OpenCV's ``imread`` (the detection families' reader) applies
    the one and scales the other; PIL alone fed the classifiers the photo sideways and a
    16-bit PNG clipped to white, so the families saw two different photos."""
    import cv2
    import numpy as np
    from PIL import Image

    from pteforge.families.vision import _rgb, detection_input

    rng = np.random.default_rng(0)
    rotated = tmp_path / "portrait.jpg"
    image = Image.fromarray((rng.random((20, 40, 3)) * 255).astype("uint8"))  # stored 40 wide, 20 high
    exif = image.getexif()
    exif[0x0112] = 6  # shown rotated 90° clockwise: 20 wide, 40 high
    image.save(rotated, exif=exif, quality=100)
    deep = tmp_path / "deep.png"
    Image.fromarray(np.full((10, 12), 40000, dtype=np.uint16)).save(deep)
    for path in (rotated, deep):
        expected = cv2.imread(str(path))[..., ::-1]
        got = np.asarray(_rgb(path))
        assert got.shape == expected.shape, path.name
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 2, path.name
        assert detection_input(path, 48)[0].shape == (1, 3, 48, 48)
    assert np.asarray(_rgb(deep))[0, 0].tolist() == [156, 156, 156]  # 40000 / 256, not clipped to 255


def test_a_photo_that_changes_between_scans_is_scanned_again(tmp_path):
    """A run asks for the same directory several times and the scan is kept; a file that
    changed since is decoded again, not answered from the kept scan."""
    from PIL import Image

    from pteforge.families.vision import image_dir

    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(photos / "red.png")
    Image.new("RGB", (8, 8), (10, 10, 200)).save(photos / "blue.png")
    assert image_dir(photos, "--calibration", 16) == ([photos / "blue.png", photos / "red.png"], None)
    (photos / "red.png").write_bytes(b"no longer an image")
    good, note = image_dir(photos, "--calibration", 16)
    assert good == [photos / "blue.png"] and note.endswith("not readable images: red.png")
