"""Untrusted files are judged by their headers before their data: a sample's shape and dtype
from its .npy header, an archive's members from its zip directory, an ONNX file's external
data from its entries, a text file's encoding; each refusal is one line naming the file."""

import math
import os
import re
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_cli import cli, error_lines

from pteforge.core import samples
from pteforge.core.errors import ExitStatus, ModelError, UsageError
from pteforge.core.limits import (DEFAULT, ENV_GB, ENV_MEMBERS, ENV_RATIO, GiB, MiB, ArchiveLimits, Entry,
                                  check_archive, check_entries, limits_from_env, read_text_file)
from pteforge.core.spec import InputSpec

FILES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def one_line(exc) -> str:
    line = exc.one_line()
    assert "\n" not in line
    return line


# ---- .npy / .npz samples: shape and dtype from the header ------------------------------

DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool", "complex64"]
KIND = {"float16": "f", "float32": "f", "float64": "f", "int8": "i", "int32": "i", "int64": "i", "uint8": "i",
        "bool": "b", "complex64": "c"}


def fed(*inputs: InputSpec):
    return types.SimpleNamespace(fed=inputs)


@FILES
@given(want=st.lists(st.integers(1, 4), min_size=1, max_size=3), have=st.lists(st.integers(1, 4), max_size=3),
       dtype=st.sampled_from(DTYPES), input_dtype=st.sampled_from(["float32", "int64", "bool"]),
       endian=st.sampled_from("<>"))
def test_a_sample_is_taken_or_refused_from_its_header_alone(tmp_path, monkeypatch, want, have, dtype, input_dtype,
                                                           endian):
    """Whatever array a .npy holds, it is taken exactly when its shape (or its shape without a
    leading 1) and its dtype's kind fit the input, and refused in one line otherwise, before
    numpy reads its data: refused, the data is never loaded."""
    want = (1, *want)
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(have, dtype=np.dtype(dtype).newbyteorder(endian)))
    spec = fed(InputSpec(want, input_dtype))
    fits = tuple(have) in (want, want[1:]) and KIND[dtype] == {"float32": "f", "int64": "i", "bool": "b"}[input_dtype]
    if fits:
        [tensor] = samples.load(path, spec)
        assert tuple(tensor.shape) == want and str(tensor.dtype) == f"torch.{input_dtype}"
        return
    with monkeypatch.context() as patched, pytest.raises(UsageError) as err:
        patched.setattr(np, "load", lambda *a, **k: pytest.fail("the data was read"))
        samples.load(path, spec)
    assert one_line(err.value).startswith(f"{path}: input 0 ")


@FILES
@given(shape=st.lists(st.integers(1, 64), min_size=1, max_size=3), cut=st.integers(1, 64))
def test_a_header_that_declares_more_data_than_follows_is_refused(tmp_path, shape, cut):
    """A .npy header whose shape asks for more bytes than the file holds (truncated, or
    declaring terabytes) is refused in one line before numpy allocates that much."""
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(shape, np.float32))
    data = path.read_bytes()
    assume(cut <= 4 * math.prod(shape))
    path.write_bytes(data[:-cut])
    with pytest.raises(UsageError) as err:
        samples.load(path, fed(InputSpec(tuple(shape))))
    assert f"{path} is not a readable numpy file: its header declares {4 * math.prod(shape)} bytes" in one_line(err.value)


def test_a_terabyte_header_in_a_tiny_npz_is_refused_by_its_header(tmp_path):
    """A 200-byte .npz whose array header declares 4 TB of the input's shape is refused from the
    header: numpy would allocate the whole array before reading a member of a zip."""
    from numpy.lib import format as npy

    import io

    head = io.BytesIO()
    npy.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": (1, 10**12)})
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", head.getvalue() + b"\0" * 16)
    with pytest.raises(UsageError) as err:
        samples.load(path, fed(InputSpec((1, 10**12), name="x")))
    assert "array x: its header declares 4000000000000 bytes of float32 (1, 1000000000000), and 16 follow it" \
        in one_line(err.value)


def test_pickled_samples_are_never_loaded(tmp_path, monkeypatch):
    mark = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (mark,))

    for path in (tmp_path / "x.npy", tmp_path / "x.npz"):
        arr = np.array([[Payload()] * 4], dtype=object)
        np.save(path, arr, allow_pickle=True) if path.suffix == ".npy" else np.savez(path, arr)
        with pytest.raises(UsageError) as err:
            samples.load(path, fed(InputSpec((1, 4))))
        assert "holds Python objects (a pickle), which pteforge never loads" in one_line(err.value)
    assert not mark.exists()


def test_bad_samples_are_refused_before_any_work_through_the_cli(capsys, tmp_path, monkeypatch):
    """An .npz over the archive limits is refused by --calibration's check before any export,
    in one line naming the file, the member, the limit and the variable that raises it."""
    folder = tmp_path / "samples"
    folder.mkdir()
    for i in range(3):
        np.savez(folder / f"s{i}.npz", np.zeros((1, 3, 16, 16), np.float32))
    np.savez_compressed(folder / "s3.npz", np.zeros((1, 3, 16, 16), np.float32))
    monkeypatch.setenv(ENV_GB, str(2048 / GiB))  # 2 KiB: a 3 KiB array is over it
    code, _, err = cli(capsys, "export", "--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights",
                       "none", "--backends", "xnnpack", "--calibration", folder, "--verify-inputs", "1",
                       "--bench-runs", "0", "--out", tmp_path / "out")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert f"'{folder / 's0.npz'}': member 'arr_0.npy' declares 3.125 KiB, over the limit of 2 KiB per member" in line
    assert f"run again with --archive-limit-gb 1 (or {ENV_GB}=1)" in line
    assert not (tmp_path / "out" / "index.json").exists()


# ---- archives: declared sizes, count and ratio, before anything is inflated -------------

entries = st.lists(st.builds(Entry, st.text("abc/._", min_size=1, max_size=8), st.integers(0, 12 * GiB),
                             st.one_of(st.none(), st.integers(0, 12 * GiB))), max_size=12)
limits = st.builds(ArchiveLimits, member_bytes=st.integers(1, 6 * GiB), total_bytes=st.integers(1, 10 * GiB),
                   members=st.integers(0, 12), ratio=st.floats(1, 2000), ratio_from=st.integers(0, 2 * MiB))


@settings(max_examples=300, deadline=None)
@given(parts=entries, limit=limits)
def test_archive_limits_refuse_exactly_what_breaks_one(parts, limit):
    """An archive is refused exactly when it has too many members, a member over the size
    limit, a member over ``ratio_from`` compressed beyond the ratio, or too many bytes in all;
    the line names the file, the member for a member's limit, and the variable that raises it."""
    broken = (len(parts) > limit.members or sum(e.size for e in parts) > limit.total_bytes
              or any(e.size > limit.member_bytes for e in parts)
              or any(e.stored is not None and e.size > limit.ratio_from and e.size / max(e.stored, 1) > limit.ratio
                     for e in parts))
    if not broken:
        check_entries("a.zip", parts, limit)
        return
    with pytest.raises(UsageError) as err:
        check_entries("a.zip", parts, limit)
    line = one_line(err.value)
    assert line.startswith("'a.zip'") and ("over the limit" in line or "beyond the limit" in line)
    assert any(var in line for var in (ENV_GB, ENV_MEMBERS, ENV_RATIO))
    if "member '" in line:
        assert any(f"member '{e.name}'" in line for e in parts)


def forged_zip(path: Path, members: dict[str, bytes], declared: dict[str, int]) -> Path:
    """A zip whose central directory declares ``declared`` uncompressed sizes (what a reader
    allocates) for members that hold a few bytes."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        for info in archive.filelist:
            info.file_size = declared.get(info.filename, info.file_size)
    return path


def refused(call, pattern: str, error=UsageError) -> None:
    """``call()`` raises ``error`` whose one line (cause and fix) matches ``pattern``."""
    with pytest.raises(error) as err:
        call()
    assert re.search(pattern, one_line(err.value)), one_line(err.value)


def test_declared_sizes_count_and_ratio_are_judged_from_the_directory(tmp_path):
    big = forged_zip(tmp_path / "big.zip", {"a": b"x", "b": b"y"}, {"b": 5 * GiB})
    refused(lambda: check_archive(big), r"^'.*big.zip': member 'b' declares 5 GiB, over the limit of 4 GiB per member "
                                        rf"\(fix: if you trust this file, run again with --archive-limit-gb 5 \(or {ENV_GB}=5\)\)$")
    many = forged_zip(tmp_path / "many.zip", {"a": b"x", "b": b"y", "c": b"z"}, {n: 3 * GiB for n in "abc"})
    refused(lambda: check_archive(many), r"member 'a' inflates 3221225472:1 \(3 GiB from 1 bytes\)")  # a forged size
    refused(lambda: check_archive(many, ArchiveLimits(ratio=math.inf)),
            rf"its 3 members declare 9 GiB in all, over the limit of 8 GiB .*--archive-limit-gb 9 \(or {ENV_GB}=9\)")
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros", bytes(8 * MiB))
    refused(lambda: check_archive(bomb), r"member 'zeros' inflates 10\d\d:1 \(8 MiB from .*\), beyond the limit of "
                                         rf"1000:1 for members over 1 MiB.*{ENV_RATIO}=10\d\d ")
    crowd = forged_zip(tmp_path / "crowd.zip", {f"m{i}": b"" for i in range(12)}, {})
    refused(lambda: check_archive(crowd, ArchiveLimits(members=10)),
            rf"holds 12 members, over the limit of 10 .*{ENV_MEMBERS}=12 ")
    assert [m.filename for m in check_archive(crowd)] == [f"m{i}" for i in range(12)]


def test_a_pt2_declaring_a_huge_member_is_refused_through_the_cli(capsys, tmp_path):
    """A .pt2 whose directory declares a 5 GiB weight is refused before torch reads it, in
    one line naming the file, the member, the limit and the variable."""
    import torch

    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(torch.nn.Linear(4, 4), (torch.randn(1, 4),)), str(good))
    with zipfile.ZipFile(good) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    weight = next(n for n in members if "/weights/weight_0" in n)
    bad = forged_zip(tmp_path / "bad.pt2", members, {weight: 5 * GiB})
    code, _, err = cli(capsys, "export", "--model", bad, "--backends", "xnnpack", "--out", tmp_path / "out")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert f"'{bad}': member '{weight}' declares 5 GiB, over the limit of 4 GiB per member" in line
    assert f"run again with --archive-limit-gb 5 (or {ENV_GB}=5)" in line
    os.environ.pop(ENV_GB, None)
    code, _, err = cli(capsys, "export", "--model", bad, "--backends", "xnnpack", "--out", tmp_path / "out",
                       "--archive-limit-gb", "6")
    os.environ.pop(ENV_GB, None)  # the flag raised it for that run, in this process
    assert "over the limit" not in err  # judged against 6 GiB: on to torch, which finds the file forged


def test_limits_are_raised_through_the_environment():
    assert limits_from_env({}) == DEFAULT
    raised = limits_from_env({ENV_GB: "32", ENV_MEMBERS: "50000", ENV_RATIO: "5000"})
    assert (raised.member_bytes, raised.total_bytes, raised.members, raised.ratio) == (32 * GiB, 32 * GiB, 50000, 5000)
    for bad in ("0", "-1", "nan", "inf", "lots"):
        with pytest.raises(UsageError, match=rf"^{ENV_GB}={bad} is not a positive number$"):
            limits_from_env({ENV_GB: bad})


# ---- ONNX external data ---------------------------------------------------------------


def external_onnx(folder: Path, location: str = "weights.data") -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path = folder / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.data", size_threshold=0)
    if location != "weights.data":
        model = onnx.load(str(path), load_external_data=False)
        for entry in model.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        onnx.save_model(model, str(path))
    return path


def test_onnx_external_data_is_judged_before_it_is_read(tmp_path, monkeypatch):
    from pteforge.models.onnx.spec import onnx_spec

    path = external_onnx(tmp_path)
    assert [i.shape for i in onnx_spec(str(path)).inputs] == [(1, 4)]
    monkeypatch.setenv(ENV_GB, str(32 / GiB))  # 32 bytes: W's 64 are over it
    with pytest.raises(ModelError) as err:
        onnx_spec(str(path))
    assert one_line(err.value) == (f"'{path}': external tensor 'W' declares 64 bytes, over the limit of 32 bytes per "
                                   f"external tensor (fix: if you trust this file, run again with --archive-limit-gb 1 (or {ENV_GB}=1))")
    monkeypatch.delenv(ENV_GB)
    (tmp_path / "weights.data").unlink()
    with pytest.raises(ModelError, match="tensor W's external data file 'weights.data' is missing"):
        onnx_spec(str(path))
    for i, outside in enumerate(("../weights.data", "/etc/passwd", "a/../../weights.data")):
        (tmp_path / f"o{i}").mkdir()
        path = external_onnx(tmp_path / f"o{i}", outside)
        with pytest.raises(ModelError, match=f"tensor W's external data '{outside}' is not a file in the model's folder"):
            onnx_spec(str(path))


def test_onnx_external_data_over_the_limit_is_refused_through_the_cli(capsys, tmp_path, monkeypatch):
    path = external_onnx(tmp_path)
    monkeypatch.setenv(ENV_GB, str(32 / GiB))
    code, _, err = cli(capsys, "export", "--model", path, "--backends", "xnnpack", "--out", tmp_path / "out")
    assert code == ExitStatus.MODEL
    [line] = error_lines(err)
    assert f"external tensor 'W' declares 64 bytes, over the limit of 32 bytes" in line and ENV_GB in line


# ---- text files ------------------------------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(lambda t: t.encode("utf-8"))))
def test_a_text_file_is_utf8_or_refused_in_one_line(tmp_path, data):
    path = tmp_path / "labels.txt"
    path.write_bytes(data)
    try:
        expected = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        with pytest.raises(UsageError) as err:
            read_text_file(path, "--labels-file")
        assert one_line(err.value).startswith(f"--labels-file {path} is not UTF-8 text (byte 0x")
        return
    assert read_text_file(path, "--labels-file") == expected


def test_a_missing_text_file_is_refused_in_one_line(tmp_path):
    with pytest.raises(UsageError, match=r"^--labels-file .*nope.txt: cannot be read \(No such file or directory\)$"):
        read_text_file(tmp_path / "nope.txt", "--labels-file")
