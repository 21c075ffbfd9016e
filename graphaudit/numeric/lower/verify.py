"""A lowering checks itself: the lowered model loads and runs in stock onnxruntime, and where Horizon's runtime is
present its outputs agree with the original file run there."""

from __future__ import annotations

import math

import numpy as np
import onnx

from ...errors import LoweringError

__all__ = ["verify_lowered", "probe_feeds", "AGREEMENT_COSINE", "AGREEMENT_ATOL"]

#: Lowered outputs must agree with Horizon's runtime on the original file: cosine similarity at least
#: AGREEMENT_COSINE, or (an output that is near zero everywhere on the probe, where the cosine measures float noise)
#: max |difference| at most AGREEMENT_ATOL x max(1, max |Horizon's output|). On real data the lowering is bound per
#: tensor by 1 LSB of its HzCalibration scale (tests/horizon_runtime/test_lowering_vs_horizon.py: worst 0.398 LSB
#: over every tensor of every real set). On the synthetic probe two runtimes' float kernels alone differ more deep
#: in a network (PP-OCRv4 det, whose lowering adds nothing but HzPreprocess: cosine 0.999989 on noise; a sigmoid
#: output of 1.7e-11 on average with 1.2e-7 max difference on the smooth probe); the lowering faults seen so far
#: (NHWC HzPreprocess, HzCalibration channel scales) were off by hundreds of LSB, far outside either bound.
AGREEMENT_COSINE = 0.9999
AGREEMENT_ATOL = 1e-4
#: Elements of all probe inputs together (float32: 256 MiB); a larger declared input is refused, not allocated.
MAX_PROBE_ELEMENTS = 1 << 26

_NP = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.DOUBLE: np.float64,
       onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8, onnx.TensorProto.INT16: np.int16,
       onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT64: np.int64, onnx.TensorProto.BOOL: np.bool_}


def _image_like(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    """Values in [-128, 128) (the ``*_128`` domain of Horizon stages) that vary smoothly over the last two axes, like
    an image: uniform noise on a grid 8 times coarser, repeated to the full size (a rank < 2 input is plain noise).
    Deep float networks fed independent noise amplify the rounding differences of two runtimes' kernels far more
    than on images (PP-OCRv4 det: output cosine 0.999989 on noise between stock onnxruntime and Horizon's)."""
    if len(shape) < 2:
        return (rng.random(size=shape, dtype=np.float32) * 256.0 - 128.0)
    coarse = [*shape[:-2], -(-shape[-2] // 8), -(-shape[-1] // 8)]
    x = rng.random(size=coarse, dtype=np.float32) * 256.0 - 128.0
    x = np.repeat(np.repeat(x, 8, axis=-2), 8, axis=-1)
    return x[..., :shape[-2], :shape[-1]]


def probe_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """One input per graph input of the declared shape (symbolic or unknown dims as 1): floats in [-128, 128) that
    vary smoothly like an image (:func:`_image_like`), integers over their dtype's range clipped to [-128, 127].

    Raises
    ------
    LoweringError
        An input whose element type cannot be generated (strings, sequences...), or inputs declaring more than
        :data:`MAX_PROBE_ELEMENTS` elements together.
    """
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    total = 0
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dt = _NP.get(tt.elem_type)
        if dt is None or not vi.type.HasField("tensor_type"):
            raise LoweringError(f"input {vi.name!r}: element type {tt.elem_type} cannot be probed")
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
        total += math.prod(shape)
        if total > MAX_PROBE_ELEMENTS:
            raise LoweringError(f"input {vi.name!r} declares shape {shape}: the inputs of the probe would hold "
                                f"{total:,} elements, more than the {MAX_PROBE_ELEMENTS:,} graphaudit allocates "
                                "to check a lowering")
        if np.issubdtype(dt, np.floating):
            feeds[vi.name] = _image_like(rng, shape).astype(dt)
        elif dt is np.bool_:
            feeds[vi.name] = rng.integers(0, 2, size=shape).astype(dt)
        else:
            info = np.iinfo(dt)
            feeds[vi.name] = rng.integers(max(info.min, -128), min(info.max, 127) + 1, size=shape).astype(dt)
    return feeds


def _first(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    nx, ny = float(x @ x), float(y @ y)
    if nx == 0 and ny == 0:
        return 1.0
    if nx == 0 or ny == 0:
        return 0.0
    return float(x @ y) / math.sqrt(nx * ny)


def verify_lowered(lowered: onnx.ModelProto, original: onnx.ModelProto, name: str) -> dict:
    """Prove a lowered model before anyone uses it.

    1. It loads in stock onnxruntime (CPU, graph optimizations off) and runs one input of the declared shape
       (:func:`probe_feeds`).
    2. Where Horizon's runtime imports (the toolchain's environment), the original file runs there on the same input
       and every output agrees with the lowered one (:data:`AGREEMENT_COSINE`, :data:`AGREEMENT_ATOL`).

    Parameters
    ----------
    lowered : onnx.ModelProto
        The result of :func:`graphaudit.numeric.lower.lower_model`.
    original : onnx.ModelProto
        The model before lowering (with its weights).
    name : str
        The model's name in messages (its path).

    Returns
    -------
    dict
        ``{"onnxruntime": "loads and runs", "outputs": n, "horizon": {output: {"cosine", "max_abs"}} or the reason it
        was not compared}``.

    Raises
    ------
    LoweringError
        onnxruntime refuses the model (its first line names the node and the reason), fails to run it, or the
        outputs disagree with Horizon's runtime (the output, its cosine and the bound).
    """
    from ..backends import HORIZON_RUNTIME, LOOP_RUN_SECONDS, horizon_unavailable, make_session, run_limited

    try:
        feeds = probe_feeds(lowered)
    except LoweringError as e:
        raise LoweringError(f"{name}: the lowered model cannot be checked: {e}") from e
    try:
        sess = make_session(lowered.SerializeToString(), "onnxruntime")
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several unrelated types
        raise LoweringError(f"{name}: the lowered model does not load in onnxruntime: {_first(e)}") from e
    loops = any(n.op_type == "Loop" for n in lowered.graph.node)
    try:  # a Loop's trip count is data: the probe run is stopped like a comparison's (LOOP_RUN_SECONDS)
        got = run_limited(sess, None, feeds, LOOP_RUN_SECONDS if loops else None)
    except Exception as e:  # noqa: BLE001
        raise LoweringError(f"{name}: the lowered model does not run in onnxruntime on an input of the declared "
                            f"shape: {_first(e)}") from e
    out_names = [o.name for o in sess.get_outputs()]
    report: dict = {"onnxruntime": "loads and runs", "outputs": len(out_names)}
    why = horizon_unavailable()
    if why is not None:
        report[HORIZON_RUNTIME] = "not compared: Horizon's runtime is not importable here"
        return report
    try:
        hz = make_session(original.SerializeToString(), HORIZON_RUNTIME)
        ref = hz.run(out_names, feeds)
    except Exception as e:  # noqa: BLE001
        report[HORIZON_RUNTIME] = f"not compared: Horizon's runtime cannot run the original ({_first(e)})"
        return report
    cosines = {}
    for n, a, b in zip(out_names, got, ref):
        same_shape = np.shape(a) == np.shape(b)
        c = _cosine(a, b) if same_shape else float("nan")
        diff = float(np.max(np.abs(np.asarray(a, np.float64) - b))) if same_shape and np.size(a) else float("nan")
        tol = AGREEMENT_ATOL * max(1.0, float(np.max(np.abs(b))) if np.size(b) else 1.0)
        cosines[n] = {"cosine": c, "max_abs": diff, "atol": tol}
        if not (c >= AGREEMENT_COSINE or diff <= tol):
            raise LoweringError(f"{name}: the lowered model disagrees with Horizon's runtime at output {n!r}: cosine "
                                f"{c:.6f} < {AGREEMENT_COSINE} and max |difference| {diff:.3g} > {tol:.3g} (shapes "
                                f"{list(np.shape(a))} / {list(np.shape(b))})")
    report[HORIZON_RUNTIME] = cosines
    return report
