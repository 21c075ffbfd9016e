"""Fuzz cases: the files one run reads and the graphaudit command line that reads them.

A :class:`Case` is fully determined by ``(seed, index)``: ``make_case(seed, i)`` draws its kind and content from
``random.Random(f"{seed}:{i}")``, so any case of a run can be rebuilt alone from its id.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterator

from . import files as F
from . import models as M

#: Case kinds and their weight in a run (every input kind graphaudit reads).
KINDS = {"onnx_truncated": 2, "onnx_bitflip": 3, "onnx_spliced": 2, "onnx_junk": 1, "onnx_hostile": 6,
         "onnx_external": 2, "yaml": 5, "hb_log": 2, "quant_info": 2, "npy": 3, "npz": 2, "image": 3, "raw": 3}

# `{in}` is the input directory, `{out}` a directory outside it for whatever the command writes.
_ONNX_COMMANDS = [
    ["explain", "{in}/a.onnx", "--no-report"],
    ["explain", "{in}/a.onnx", "{in}/b.onnx", "--no-report"],
    ["diff", "{in}/a.onnx", "{in}/b.onnx"],
    ["compare", "{in}/a.onnx", "{in}/b.onnx", "--random", "1"],
    ["compare", "{in}/b.onnx", "{in}/a.onnx", "--random", "1", "--no-isolated"],
    ["explain", "{in}/a.onnx", "{in}/b.onnx", "--random", "1", "--out", "{out}/rep"],
    ["lower", "{in}/a.onnx", "-o", "{out}/lowered.onnx"],
    ["render", "{in}/a.onnx", "{in}/b.onnx", "-o", "{out}/d.dot"],
]


@dataclass
class Case:
    """One run: ``files`` (path relative to the input directory -> bytes; ``../name`` lands next to it) and the
    command line (``argv`` after ``python -m graphaudit``, with ``{in}``/``{out}`` placeholders)."""

    id: str
    kind: str
    files: dict[str, bytes] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)

    @property
    def n_inputs(self) -> int:
        """Generated files the run reads (the base models it is paired with included)."""
        return len(self.files)


def _pair(rng: random.Random, bad: bytes) -> dict[str, bytes]:
    """The damaged model as a.onnx or b.onnx, a good base model as the other."""
    other = M.good(rng)
    return {"a.onnx": bad, "b.onnx": other} if rng.random() < 0.6 else {"a.onnx": other, "b.onnx": bad}


def _onnx(rng: random.Random, kind: str) -> tuple[dict[str, bytes], list[str]]:
    gen = {"onnx_truncated": M.truncated, "onnx_bitflip": M.bit_flipped, "onnx_spliced": M.spliced,
           "onnx_junk": M.junk, "onnx_hostile": M.hostile}[kind]
    return _pair(rng, gen(rng)), list(rng.choice(_ONNX_COMMANDS))


def _external(rng: random.Random) -> tuple[dict[str, bytes], list[str]]:
    files = M.external(rng)
    files["b.onnx"] = M.float_model().SerializeToString()
    files["../outside.bin"] = bytes(512)
    argv = rng.choice([["explain", "{in}/model.onnx", "{in}/b.onnx", "--no-report"],
                       ["compare", "{in}/b.onnx", "{in}/model.onnx", "--random", "1"],
                       ["lower", "{in}/model.onnx", "-o", "{out}/l.onnx"]])
    return files, argv


def _yaml(rng: random.Random) -> tuple[dict[str, bytes], list[str]]:
    files = {"config.yaml": F.config_yaml(rng), "model.onnx": M.float_model().SerializeToString(),
             "model_output/m_original.onnx": M.float_model().SerializeToString(),
             "model_output/m_qdq.onnx": M.qdq_model().SerializeToString()}
    argv = rng.choice([["lint", "{in}/config.yaml"], ["lint", "{in}/config.yaml", "--stages", "{in}/model_output"],
                       ["lint", "{in}/config.yaml", "--format", "sarif", "-o", "{out}/l.sarif"],
                       ["explain", "{in}/model_output", "--config", "{in}/config.yaml", "--no-report"]])
    return files, argv


def _log(rng: random.Random, kind: str) -> tuple[dict[str, bytes], list[str]]:
    name = "hb_mapper_makertbin.log" if kind == "hb_log" else "m_quant_info.json"
    body = F.hb_log(rng) if kind == "hb_log" else F.quant_info(rng)
    files = {name: body, "a.onnx": M.float_model().SerializeToString(), "b.onnx": M.qdq_model().SerializeToString()}
    argv = rng.choice([["explain", "{in}/a.onnx", "{in}/b.onnx", "--log", "{in}/" + name, "--no-report"],
                       ["explain", "{in}/a.onnx", "{in}/b.onnx", "--log", "{in}/" + name, "--json", "{out}/r.json",
                        "--no-report", "--random", "1"]])
    return files, argv


def _data(rng: random.Random, kind: str) -> tuple[dict[str, bytes], list[str]]:
    files = {"a.onnx": M.float_model().SerializeToString(), "b.onnx": M.qdq_model().SerializeToString()}
    n = rng.choice([1, 1, 2, 3])
    for i in range(n):
        if kind == "npy":
            files[f"data/{i}.npy"] = F.npy(rng)
        elif kind == "npz":
            files[f"data/{i}.npz"] = F.npz(rng)
        elif kind == "image":
            suffix, b = F.image(rng)
            files[f"data/{i}{suffix}"] = b
        else:
            suffix, b = F.raw(rng)
            files[f"data/{i}{suffix}"] = b
    data = "{in}/data" if n > 1 or rng.random() < 0.5 else "{in}/" + next(k for k in files if k.startswith("data/"))
    argv = rng.choice([["check-inputs", "{in}/a.onnx", "--data", data],
                       ["compare", "{in}/a.onnx", "{in}/b.onnx", "--data", data],
                       ["explain", "{in}/a.onnx", "{in}/b.onnx", "--data", data, "--no-report"]])
    if kind == "raw":
        if rng.random() < 0.5:
            argv += ["--raw-dtype", rng.choice(["uint8", "float32", "float16", "object", "V3", "x", "int64"]),
                     "--raw-shape", rng.choice(["1x3x8x8", "1x8x8x3", "0x3x8x8", "-1x3", "99999999999x99999999999",
                                                "1x3x8", "abc"])]
        else:
            files["config.yaml"] = F.YAML_1X.replace("float32", rng.choice(["uint8", "float32", "int16", "x"])).replace(
                "./cal", "./data").encode()
            argv = rng.choice([["lint", "{in}/config.yaml", "--data", "{in}/data", "--model", "{in}/a.onnx"],
                               ["check-inputs", "{in}/a.onnx", "--config", "{in}/config.yaml", "--data", "{in}/data"]])
    return files, argv


def make_case(seed: int, index: int, kind: str | None = None) -> Case:
    """Case ``index`` of the run seeded ``seed`` (of ``kind`` when given, else drawn with the weights of KINDS)."""
    rng = random.Random(f"{seed}:{index}")
    drawn = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    kind = kind or drawn
    if kind.startswith("onnx_") and kind != "onnx_external":
        files, argv = _onnx(rng, kind)
    elif kind == "onnx_external":
        files, argv = _external(rng)
    elif kind == "yaml":
        files, argv = _yaml(rng)
    elif kind in ("hb_log", "quant_info"):
        files, argv = _log(rng, kind)
    else:
        files, argv = _data(rng, kind)
    return Case(f"{seed}-{index}", kind, files, argv)


def make_cases(seed: int, inputs: int) -> Iterator[Case]:
    """Cases ``0, 1, ...`` of ``seed`` until they hold at least ``inputs`` generated files (made one at a time)."""
    total = i = 0
    while total < inputs:
        c = make_case(seed, i)
        i += 1
        total += c.n_inputs
        yield c


def per_kind(seed: int, each: int) -> list[Case]:
    """``each`` cases of every kind in KINDS (the CI subset: every input kind, whatever the weights)."""
    return [make_case(seed, k * 1000 + i, kind) for k, kind in enumerate(KINDS) for i in range(each)]
