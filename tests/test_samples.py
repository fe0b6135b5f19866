"""A model whose inputs are not photos, calibrated and verified on the user's own input
files (``--calibration DIR`` of ``.npy``/``.npz``): calibration takes some, verification the
others, and bad files are refused before any work."""

import json

import numpy as np

from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus


def windows(folder, count, scale=1.0, shape=(1, 1, 256)):
    """``count`` windows of a tone each (a different pitch), with a little noise."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    t = np.arange(shape[-1]) / 8000
    for i in range(count):
        x = np.sin(2 * np.pi * (200 + 90 * i) * t) + 0.05 * rng.standard_normal(shape[-1])
        np.save(folder / f"w{i:02d}.npy", (scale * x).reshape(shape).astype(np.float64))
    return folder


def export(capsys, out, calibration, *more):
    return cli(capsys, "export", "--model", "tiny_models:listener", "--input-shape", "1,1,256",
               "--backends", "xnnpack", "xnnpack:int8", "--calibration", calibration, "--calibration-samples", "8",
               "--verify-inputs", "2", "--bench-runs", "0", "--out", out, *more)


def test_input_files_calibrate_and_the_others_verify(capsys, tmp_path):
    loud = windows(tmp_path / "loud", 12, scale=50.0)
    quiet = windows(tmp_path / "quiet", 12)
    (quiet / "README.txt").write_text("what these windows are")  # left out, and said to be
    code, stdout, err = export(capsys, tmp_path / "a", quiet)
    assert code == ExitStatus.OK, err
    assert f"--calibration {quiet}: skipping 1 file(s) that are not .npy or .npz samples: README.txt" in err, err
    rows = {e["target"]: e for e in json.loads((tmp_path / "a" / "index.json").read_text())["models"]}
    for row in rows.values():  # verified on the 3 files after the 8 calibration used, not on seeded inputs
        assert row["status"] == "VERIFIED", row
        assert row["verification"]["inputs"] == 3
        assert row["verification"]["inputs_from"].startswith("3 file(s) of --calibration ")
    cal = rows["xnnpack:int8"]["quantization"]["calibration"]
    assert (cal["files"], cal["synthetic"], cal["images"]) == (8, 0, 0)
    assert "calibrated on 8 input files" in " ".join(stdout.split())
    # the files decide the program: calibrated on louder windows, the int8 program differs (and is not
    # taken from the cache of the first); fp32 is not calibrated, but verified on other inputs, so it is new too
    code, _, err = export(capsys, tmp_path / "b", loud)
    assert code == ExitStatus.OK, err
    again = {e["target"]: e for e in json.loads((tmp_path / "b" / "index.json").read_text())["models"]}
    assert again["xnnpack:int8"]["hash"] != rows["xnnpack:int8"]["hash"]
    assert again["xnnpack:int8"]["quantization"]["calibration"]["source"].endswith("loud")


def test_several_inputs_by_position_unbatched_and_cast(capsys, tmp_path):
    folder = tmp_path / "tokens"
    folder.mkdir()
    for i in range(4):  # int32 ids without their batch dimension, a float64 scale
        np.savez(folder / f"s{i}.npz", np.arange(i, i + 5, dtype=np.int32), np.array([[0.5 + i]], dtype=np.float64))
    code, _, err = cli(capsys, "export", "--model", "tiny_models:two_inputs", "--input-shape", "int64:1,5",
                       "--input-shape", "1,1", "--backends", "xnnpack", "--calibration", folder,
                       "--verify-inputs", "1", "--bench-runs", "0", "--out", tmp_path / "out")
    assert code == ExitStatus.OK, err
    [row] = json.loads((tmp_path / "out" / "index.json").read_text())["models"]
    assert row["status"] == "VERIFIED" and row["verification"]["inputs_from"].startswith("2 file(s)")


def test_files_that_do_not_fit_are_refused_before_any_work(capsys, tmp_path):
    out = tmp_path / "out"
    wrong = windows(tmp_path / "wrong", 6, shape=(1, 1, 128))
    code, _, err = export(capsys, out, wrong)
    [line] = error_lines(err)
    assert code == ExitStatus.USAGE and "w00.npy: input 0 has shape (1, 1, 128), and the model takes (1, 1, 256)" in line
    assert not out.exists()

    keys = tmp_path / "keys"
    keys.mkdir()
    np.savez(keys / "a.npz", audio=np.zeros((1, 1, 256)))
    code, _, err = export(capsys, out, keys)
    assert code == ExitStatus.USAGE and "holds arrays audio; the model's inputs are input 0" in error_lines(err)[0]

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.npy").write_bytes(b"\x93NUMPY not really")
    code, _, err = export(capsys, out, broken)
    assert code == ExitStatus.USAGE and "a.npy is not a readable numpy file" in error_lines(err)[0]

    ints = windows(tmp_path / "ints", 2)
    np.save(ints / "w00.npy", np.zeros((1, 1, 256), dtype=np.int64))
    code, _, err = export(capsys, out, ints)
    assert code == ExitStatus.USAGE and "input 0 is int64, and the model takes float32" in error_lines(err)[0]
    assert not out.exists()

    # a NaN (or a float64 too large for float32) in a sample: every comparison on it was
    # "the model itself gives NaN", the model blamed for the file
    for bad, said in ((np.nan, "w01.npy: input 0 holds NaN at index 7"),
                      (1e300, "w01.npy: input 0 holds an infinity (as float32) at index 7")):
        odd = windows(tmp_path / f"odd{bad}", 3)
        window = np.load(odd / "w01.npy")
        window.flat[7] = bad
        np.save(odd / "w01.npy", window)
        code, _, err = export(capsys, out, odd)
        assert code == ExitStatus.USAGE and said in error_lines(err)[0], err
        assert not out.exists()
