"""Data files that cannot be read are left out with finding P212, and the run goes on with the others.

Before: a truncated .npy in `explain STAGES --data DIR` ended the whole run (exit 2, no structure report), while the
same file reached through the config's cal_data_dir skipped the numbers and the report went on. The expected
figures here come from a second run on a directory holding only the intact files: leaving a file out must give
exactly the comparison of the files that are left.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from graphaudit.cli import main
from graphaudit.data.source import open_data
from graphaudit.data.spec import InputSpec
from graphaudit.errors import DataError, DataUnreadableError

X = [InputSpec("x", "float32", (1, 3, 48, 192))]


def _cut(p, keep: float = 0.5) -> str:
    """Cut ``p`` to ``keep`` of its bytes; numpy's reading of what is left: the words of the DataError."""
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ValueError):  # numpy itself refuses the file: it is broken, not just unusual
        np.load(p)
    return f"{p}: truncated .npy: {int(len(data) * keep)} bytes, [1,3,48,192] float32 needs {len(data)}"


@pytest.fixture
def cls_data(samples, tmp_path):
    """The 16 real PP-OCR cls samples (.npy, [1,3,48,192] float32), copied: ``(dir, stages dir)``."""
    src = samples / "data" / "ppocr_cls" / "x"
    d = tmp_path / "data"
    shutil.copytree(src, d)
    assert len(list(d.glob("*.npy"))) == 16
    return d, samples / "ort" / "ppocr_cls"


def _report(out):
    return json.loads((out / "report.json").read_text())


def test_a_truncated_file_is_left_out_and_the_run_goes_on(cls_data, tmp_path, capsys):
    d, stages = cls_data
    words = _cut(d / "3.npy")
    assert main(["explain", str(stages), "--data", str(d), "--no-isolated", "--out", str(tmp_path / "o1")]) in (0, 1)
    got = _report(tmp_path / "o1")
    (p212,) = [f for f in got["findings"] if f["code"] == "P212"]
    assert p212["severity"] == "warning" and words in p212["message"] and "1 of 16 data file(s)" in p212["message"]
    assert got["run"]["samples_used"] == 15
    # independently: the same run on a directory of the 15 intact files alone
    ok = tmp_path / "ok"
    ok.mkdir()
    for f in d.glob("*.npy"):
        if f.name != "3.npy":
            shutil.copy(f, ok / f.name)
    assert main(["explain", str(stages), "--data", str(ok), "--no-isolated", "--out", str(tmp_path / "o2")]) in (0, 1)
    want = _report(tmp_path / "o2")
    assert got["numeric"] == want["numeric"] and got["stages"] == want["stages"]
    assert [f for f in got["findings"] if f["code"] != "P212"] == want["findings"]
    assert "P212" in capsys.readouterr().out


@pytest.mark.parametrize("given", ["dir", "file"])
def test_no_readable_sample_skips_the_numbers_with_the_finding(cls_data, tmp_path, given):
    d, stages = cls_data
    for f in d.glob("*.npy"):
        if f.name not in ("0.npy", "1.npy"):
            f.unlink()
    words = [_cut(d / "0.npy"), _cut(d / "1.npy", 0.01)]
    data = d if given == "dir" else d / "0.npy"
    code = main(["explain", str(stages), "--data", str(data), "--out", str(tmp_path / "o")])
    rep = _report(tmp_path / "o")
    assert code == (1 if any(f["severity"] == "error" for f in rep["findings"]) else 0)
    (p212,) = [f for f in rep["findings"] if f["code"] == "P212"]
    assert words[0] in p212["message"] and "no file could be read" in p212["message"]
    assert (words[1] in p212["message"]) == (given == "dir")
    assert rep["numeric"] is None and words[0] in rep["run"]["numeric_skipped"]
    assert [t["counts"] for t in rep["transitions"]]  # the structure report is all there


def test_compare_and_check_inputs_without_a_readable_sample_are_exit_2(cls_data, capsys):
    d, stages = cls_data
    for f in d.glob("*.npy"):
        _cut(f)
    assert main(["compare", str(stages), "--data", str(d)]) == 2
    assert main(["check-inputs", str(stages), "--data", str(d)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(f"{d}: none of its 16 data file(s) could be read: {d}/0.npy: truncated" in e
                                 for e in err)
    assert err[0].startswith("graphaudit: error: compare needs samples: ")


def test_check_inputs_reports_the_file_left_out(cls_data, capsys):
    d, stages = cls_data
    words = _cut(d / "7.npy")
    main(["check-inputs", str(stages), "--data", str(d)])
    out = " ".join(capsys.readouterr().out.split())
    assert "P212" in out and words in out


def test_open_data_leaves_out_what_it_cannot_read(tmp_path):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, 3, 48, 192)).astype(np.float32) for _ in range(4)]
    for i, a in enumerate(arrays):
        np.save(tmp_path / f"{i}.npy", a)
    words = _cut(tmp_path / "1.npy")
    (tmp_path / "2.npy").write_bytes(b"not numpy")
    src = open_data(tmp_path, X)
    assert len(src) == 2 and src.files == [tmp_path / "0.npy", tmp_path / "3.npy"]
    assert [str(p) for p, _ in src.unreadable] == [str(tmp_path / "1.npy"), str(tmp_path / "2.npy")]
    assert src.unreadable[0][1] == words and "not a .npy array (bad magic)" in src.unreadable[1][1]
    got = [s["x"] for s in src]
    assert np.array_equal(got[0], arrays[0]) and np.array_equal(got[1], arrays[3])
    # a file given alone that cannot be read: the error it always was (a DataError), now saying why no sample
    with pytest.raises(DataUnreadableError) as e:
        open_data(tmp_path / "1.npy", X)
    assert str(e.value) == words and isinstance(e.value, DataError)
    # a shape that does not fit is not a file that cannot be read: the directory is refused as before
    np.save(tmp_path / "4.npy", np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(DataError, match="4.npy: array shape") as e:
        open_data(tmp_path, X)
    assert not isinstance(e.value, DataUnreadableError)


def test_calibration_layout_leaves_out_the_sample_of_every_input(tmp_path):
    """calibration_data/<input>/N.npy of two inputs: a bad file of one input drops that sample for both."""
    xy = [InputSpec("x", "float32", (1, 3, 48, 192)), InputSpec("y", "float32", (1, 4))]
    for name, shape in (("x", (1, 3, 48, 192)), ("y", (1, 4))):
        (tmp_path / name).mkdir()
        for i in range(3):
            np.save(tmp_path / name / f"{i}.npy", np.full(shape, i, np.float32))
    _cut(tmp_path / "x" / "1.npy")
    src = open_data(tmp_path, xy)
    assert len(src) == 2 and [float(s["y"][0, 0]) for s in src] == [0.0, 2.0]
    assert [p for p, _ in src.unreadable] == [tmp_path / "x" / "1.npy"]


def test_config_cal_data_dir_leaves_out_a_raw_file_of_the_wrong_size(samples, tmp_path):
    """The real hb_mapper set's calibration folder (8 raw .bgr files) with one cut in half: 7 samples run."""
    src = samples / "hb" / "ppocr_cls_bayes-e"
    if not src.is_dir():
        pytest.skip("real hb_mapper sets not built")
    s = tmp_path / "set"
    shutil.copytree(src, s)
    f = s / "calibration_data_bgr" / "00.bgr"
    f.write_bytes(f.read_bytes()[:13824])  # 1x3x48x192 uint8 is 27,648 bytes
    main(["explain", str(s / "model_output"), "--config", str(s / "config.yaml"), "--no-isolated",
          "--out", str(tmp_path / "o")])
    rep = _report(tmp_path / "o")
    assert rep["run"]["samples_used"] == 7 and rep["numeric"]
    (p212,) = [x for x in rep["findings"] if x["code"] == "P212"]
    assert f"{f}: 13824 bytes, but input_shape 1x3x48x192 of uint8 needs 27648" in p212["message"]


def test_images_cut_short_are_found_when_opened(samples, tmp_path):
    """A PNG or JPEG cut in half passed the header check and failed in the middle of the run (exit 2); it is left
    out when the directory is opened. Complete files with bytes after their end (a trailer) are kept, and decode."""
    from PIL import Image

    pngs = sorted((samples / "data" / "ppocr_cls" / "images").glob("*.png"))[:3]
    for kind, ext in (("PNG", ".png"), ("JPEG", ".jpg")):
        d = tmp_path / kind
        d.mkdir()
        for i, p in enumerate(pngs):
            Image.open(p).convert("RGB").save(d / f"{i}{ext}", kind)
        whole = (d / f"1{ext}").read_bytes()
        (d / f"1{ext}").write_bytes(whole[: len(whole) // 2])
        with pytest.raises(OSError):  # Pillow itself fails on the pixels of the cut file
            Image.open(d / f"1{ext}").load()
        (d / f"2{ext}").write_bytes((d / f"2{ext}").read_bytes() + b"trailer")
        src = open_data(d, X)
        assert src.files == [d / f"0{ext}", d / f"2{ext}"] and len(src) == 2, kind
        assert [p for p, _ in src.unreadable] == [d / f"1{ext}"]
        assert "Pillow cannot decode this image" in src.unreadable[0][1]
        assert [s["x"].shape[-1] for s in src] == [3, 3]


def test_a_dtype_the_input_cannot_take_is_left_out(tmp_path):
    """A complex .npy among float ones: left out (it ended the run with exit 2); all of them: DataUnreadableError."""
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.zeros((1, 3, 48, 192), np.float32))
    np.save(tmp_path / "1.npy", np.zeros((1, 3, 48, 192), np.complex64))
    src = open_data(tmp_path, X)
    assert len(src) == 2 and src.unreadable[0][1] == f"{tmp_path / '1.npy'}: dtype complex64 cannot feed input 'x' " \
                                                     "(float32)"
    for i in (0, 2):
        np.save(tmp_path / f"{i}.npy", np.zeros((1, 3, 48, 192), bool))
    with pytest.raises(DataUnreadableError, match="none of its 3 data file"):
        open_data(tmp_path, X)


def _flip(p, n: int = 40) -> None:
    """Invert ``n`` bytes in the middle of ``p`` (the file keeps its size, header and end)."""
    b = bytearray(p.read_bytes())
    mid = len(b) // 2
    b[mid:mid + n] = bytes(x ^ 0xFF for x in b[mid:mid + n])
    p.write_bytes(bytes(b))


@pytest.mark.parametrize("kind", ["BMP cut short", "PNG changed mid-file"])
def test_images_broken_inside_are_found_when_opened(samples, tmp_path, kind):
    """A BMP cut short (no end marker to look at) or a PNG whose middle bytes changed (its end intact) passed the
    open checks and ended the run when its pixels were decoded; they are left out when the directory is opened."""
    from PIL import Image

    pngs = sorted((samples / "data" / "ppocr_cls" / "images").glob("*.png"))[:3]
    ext = ".bmp" if kind.startswith("BMP") else ".png"
    for i, p in enumerate(pngs):
        Image.open(p).convert("RGB").save(tmp_path / f"{i}{ext}")
    bad = tmp_path / f"1{ext}"
    if ext == ".bmp":
        bad.write_bytes(bad.read_bytes()[: bad.stat().st_size * 2 // 3])
    else:
        _flip(bad)
    with pytest.raises(Exception):  # Pillow itself fails on the pixels of the broken file
        Image.open(bad).load()
    src = open_data(tmp_path, X)
    assert src.files == [tmp_path / f"0{ext}", tmp_path / f"2{ext}"] and len(src) == 2
    assert [p for p, _ in src.unreadable] == [bad] and "Pillow cannot decode this image" in src.unreadable[0][1]
    want = [np.asarray(Image.open(tmp_path / f"{i}{ext}").convert("RGB")) for i in (0, 2)]
    assert all(np.array_equal(s["x"][0], w) for s, w in zip(src, want))


@pytest.mark.parametrize("compressed", [True, False])
def test_an_npz_member_corrupted_mid_file_is_left_out_and_the_run_goes_on(cls_data, tmp_path, compressed):
    """A .npz whose member's middle bytes changed (zip's CRC-32 no longer matches; zlib may fail first) ended the
    run with exit 2 when its samples were read; it is P212 now, and the comparison is the one of the other files."""
    d, stages = cls_data
    save = np.savez_compressed if compressed else np.savez
    for name in ("bad", "ok"):
        (tmp_path / name).mkdir()
    for k in range(4):
        x = np.load(d / f"{k}.npy")
        save(tmp_path / "bad" / f"{k}.npz", x=x)
        if k != 2:
            save(tmp_path / "ok" / f"{k}.npz", x=x)
    _flip(tmp_path / "bad" / "2.npz", 16)
    with pytest.raises(Exception):  # numpy itself fails reading the member
        np.load(tmp_path / "bad" / "2.npz")["x"]
    assert main(["explain", str(stages), "--data", str(tmp_path / "bad"), "--no-isolated",
                 "--out", str(tmp_path / "o1")]) in (0, 1)
    got = _report(tmp_path / "o1")
    (p212,) = [f for f in got["findings"] if f["code"] == "P212"]
    assert p212["severity"] == "warning" and f"{tmp_path / 'bad' / '2.npz'}: corrupt or truncated .npz" in p212["message"]
    assert got["run"]["samples_used"] == 3
    assert main(["explain", str(stages), "--data", str(tmp_path / "ok"), "--no-isolated",
                 "--out", str(tmp_path / "o2")]) in (0, 1)
    want = _report(tmp_path / "o2")
    assert got["numeric"] == want["numeric"] and [f for f in got["findings"] if f["code"] != "P212"] == want["findings"]


def test_p212_counts_samples_for_a_calibration_directory_of_two_inputs(tmp_path):
    """calibration_data/x/N.npy + y/N.npy, 4 samples, x/1.npy cut in half: the sample is left out for both inputs
    (y/1.npy is not read either). Before, P212 said "1 of 7 data file(s) ... use the other 6 file(s)": 8 files
    exist and 2 were left out. Expected (counted by hand): 1 of 4 samples left out, 3 samples used per input."""
    import onnx.parser

    from graphaudit.inputcheck import check_inputs
    from graphaudit.load import load_stage

    m = onnx.parser.parse_model('<ir_version: 8, opset_import: ["" : 13]>\ng (float[1,3,8,8] x, float[1,4] y) => '
                                '(float[1,3,8,8] a, float[1,4] b) { a = Relu (x)\n b = Relu (y) }')
    onnx.save(m, tmp_path / "two.onnx")
    cal = tmp_path / "cal"
    rng = np.random.default_rng(0)
    for name, shape in (("x", (1, 3, 8, 8)), ("y", (1, 4))):
        (cal / name).mkdir(parents=True)
        for i in range(4):
            np.save(cal / name / f"{i}.npy", rng.standard_normal(shape).astype(np.float32))
    size = (cal / "x" / "1.npy").stat().st_size  # 128 header bytes + 3*8*8 float32 (768)
    _cut(cal / "x" / "1.npy")
    words = f"{cal / 'x' / '1.npy'}: truncated .npy: {size // 2} bytes, [1,3,8,8] float32 needs {size}"
    assert size == 128 + 768
    stats, found = check_inputs([load_stage(tmp_path / "two.onnx", role="original", name="two")], cal)
    assert stats["x"].samples == stats["y"].samples == 3
    (p212,) = [f for f in found if f.code == "P212"]
    assert p212.message == ("1 of 4 sample(s) were left out for every input ('x', 'y': a sample is one file per "
                            "input) because a file of theirs could not be read or fed (the input checks and the "
                            f"numeric comparison use the other 3 sample(s)): {words}"), p212.message
    assert p212.evidence["counts"] == "samples" and p212.evidence["paired_inputs"] == ["x", "y"]
