"""The one-line error for an .npz none of whose keys names the input lists a few keys, not all of them."""

from __future__ import annotations

import numpy as np

from .test_cli import assert_user_error, run


def test_many_keys_are_cut_to_five_and_a_count(tmp_path, samples):
    """5000 members used to make a 44,000-character "one-line" error."""
    z = tmp_path / "nomatch.npz"
    np.savez(z, **{f"m{i}": np.zeros(1, np.float32) for i in range(5000)})
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--data", str(z))
    assert_user_error(p, f"{z}: no array for input 'x' (keys: 'm0', 'm1', 'm2', 'm3', 'm4', ... and 4995 more)")
    assert len(p.stderr) < 200 + len(str(z))


def test_few_keys_are_all_listed_and_long_ones_cut(tmp_path, samples):
    z = tmp_path / "two.npz"
    long = "k" * 100
    np.savez(z, a=np.zeros(1, np.float32), **{long: np.zeros(1, np.float32)})
    p = run("compare", str(samples / "ort" / "ppocr_cls"), "--data", str(z))
    assert_user_error(p, f"{z}: no array for input 'x' (keys: 'a', '{'k' * 57}...')")
