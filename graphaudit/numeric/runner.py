"""onnxruntime sessions of stage models (custom ops lowered) that expose chosen intermediate tensors."""

from __future__ import annotations

from typing import Iterable

import numpy as np
import onnx

from ..errors import GraphAuditError, LoweringError, StageRunError
from ..stage import StageGraph
from .backends import HORIZON_RUNTIME, LOOP_RUN_SECONDS, make_session, run_limited, session_options
from .lower import lower_model, needs_lowering

__all__ = ["StageRunner", "session_options", "extract_submodel", "LOOP_RUN_SECONDS"]



class StageRunner:
    """A stage in onnxruntime (CPUExecutionProvider, optimizations off) with extra outputs.

    Parameters
    ----------
    stage : StageGraph
    capture : iterable of str
        Tensor names to expose as outputs (names absent from the model are ignored and listed
        in :attr:`missing`).
    runtime : {"onnxruntime", "horizon"}
        ``"onnxruntime"``: stock onnxruntime, Horizon's custom ops lowered first
        (:func:`graphaudit.numeric.lower.lower_model`); ``"horizon"``: Horizon's own runtime runs the file as the
        toolchain wrote it, fixed-point stage included (:mod:`graphaudit.numeric.backends`).
    model : onnx.ModelProto, optional
        Run this model instead of the file at ``stage.path`` (a model built from the stage, such as a hybrid of two
        stages; ``stage`` still names it and gives its input contract). Not modified.
    threads : int
        onnxruntime intra-op threads (0: its default, one per core); ignored by Horizon's runtime.
    keep_model : bool
        Keep the model run (lowered, with the extra outputs) as :attr:`model` once the session holds its own copy
        (what isolated regions are extracted from); False drops it (``model`` is None): the session does not need
        it, and it is one more copy of the stage's weights in memory.
    arena : bool
        Give the stock onnxruntime session its memory arena (default False: what a run allocates goes back to
        malloc when freed, so the next stage or region reuses it; :func:`graphaudit.numeric.backends.make_session`).

    Raises
    ------
    StageRunError
        The model cannot be read with its weights (external data missing, not a regular file, a symbolic link,
        outside the model's directory, cut short), its custom ops cannot be lowered, or the runtime refuses the
        model: the comparison reports the stage as not run (N403) and goes on with the others.
    """

    def __init__(self, stage: StageGraph, capture: Iterable[str], runtime: str = "onnxruntime",
                 model: onnx.ModelProto | None = None, threads: int = 0, keep_model: bool = True,
                 arena: bool = False):
        self.stage = stage
        self.runtime = runtime
        try:
            model = onnx.load(stage.path) if model is None else _copy(model)
        except Exception as e:  # noqa: BLE001 - external data or protobuf problems become one line
            raise StageRunError(f"{stage.path}: cannot load weights for execution ({_first_line(e)})",
                                stage.path) from e
        self.lowered: dict[str, int] = {}
        if runtime != HORIZON_RUNTIME and needs_lowering(model):
            try:
                res = lower_model(model, stage.path)
            except LoweringError as e:
                raise StageRunError(str(e), stage.path) from e
            model, self.lowered = res.model, res.lowered
            del res
        produced = {o for n in model.graph.node for o in n.output if o}
        produced |= {i.name for i in model.graph.input}
        have = {o.name for o in model.graph.output}
        self.missing: list[str] = []
        for name in dict.fromkeys(capture):
            if name in have:
                continue
            if name not in produced:
                self.missing.append(name)
                continue
            model.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
        self.model = model if keep_model else None
        self.loops = [n.id for n in stage.nodes.values() if n.op_type == "Loop" and n.domain in ("", "ai.onnx")]
        try:
            serialized = model.SerializeToString()
            del model  # with keep_model=False the session's copy is the only one left
            # no memory arena by default: an arena keeps the high-water mark of every captured tensor per session for
            # good (all of them are outputs); without it a stage's values go back to malloc once reduced and the next
            # stage reuses them (bundled PP-OCRv4 det, three stages, 8 samples: peak RSS 4.16-4.25 GB -> 2.13-2.14 GB with
            # backends.one_malloc_arena, 9.3-11.1 s -> 7.9-8.7 s)
            self.session = make_session(serialized, runtime, threads=threads, arena=arena)
            del serialized
            # names that are not UTF-8 load, then fail here (UnicodeDecodeError): the runtime cannot use the stage
            self.input_names = [i.name for i in self.session.get_inputs()]
            self.output_names = [o.name for o in self.session.get_outputs()]
        except Exception as e:  # noqa: BLE001 - onnxruntime raises several unrelated types
            who = "Horizon's runtime" if runtime == HORIZON_RUNTIME else "onnxruntime"
            why = ("a name in the file is not UTF-8 text, which ONNX requires" if isinstance(e, UnicodeDecodeError)
                   else _first_line(e))
            raise StageRunError(f"{stage.path}: {who} cannot load the stage ({why})", stage.path) from e

    def run(self, feeds: dict[str, np.ndarray], sample: str | None = None) -> dict[str, np.ndarray]:
        """Run one sample; returns every exposed tensor by name. ``sample`` names it (its file, or ``sample K``) in
        the error when the runtime fails on it.

        Raises
        ------
        GraphAuditError
            No data for one of the stage's inputs.
        StageRunError
            The runtime fails on the data (shapes, dtypes, a kernel error): the comparison reports the stage as not
            run (N403, naming ``sample`` when given) and goes on with the stages before it.
        """
        limit = LOOP_RUN_SECONDS if self.loops and self.runtime != HORIZON_RUNTIME else None
        try:
            values = run_limited(self.session, None, {k: feeds[k] for k in self.input_names}, limit)
        except KeyError as e:
            raise GraphAuditError(f"{self.stage.path}: no data for input {e.args[0]!r}") from e
        except Exception as e:  # noqa: BLE001
            who = "Horizon's runtime" if self.runtime == HORIZON_RUNTIME else "onnxruntime"
            why = _first_line(e)
            if isinstance(e, TimeoutError):
                why = (f"{why} on one sample; its Loop node(s) {', '.join(repr(x) for x in self.loops[:3])} may not "
                       "end (trip count and condition are data)")
            raise StageRunError(f"{self.stage.path}: {who} failed on {sample or 'the data'} ({why})",
                                str(self.stage.path)) from e
        return dict(zip(self.output_names, values))


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def extract_submodel(model: onnx.ModelProto, inputs: dict[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto | None:
    """The part of ``model`` that computes ``outputs`` from ``inputs`` (and weights), as a model.

    Graph inputs are typed from the given arrays. Returns ``None`` when the outputs depend on
    a tensor that is neither given nor a weight (the cut is not closed).
    """
    producers = {}
    for n in model.graph.node:
        for o in n.output:
            if o:
                producers[o] = n
    inits = {i.name: i for i in model.graph.initializer}
    needed_nodes: list[onnx.NodeProto] = []
    seen_nodes: set[int] = set()
    used_inits: set[str] = set()
    stack = list(outputs)
    visited: set[str] = set()
    while stack:
        t = stack.pop()
        if t in visited or t in inputs:
            continue
        visited.add(t)
        if t in inits:
            used_inits.add(t)
            continue
        n = producers.get(t)
        if n is None:
            return None
        if id(n) not in seen_nodes:
            seen_nodes.add(id(n))
            needed_nodes.append(n)
            stack.extend(x for x in n.input if x)
    order = {id(n): i for i, n in enumerate(model.graph.node)}
    needed_nodes.sort(key=lambda n: order[id(n)])
    g = onnx.helper.make_graph(
        needed_nodes, "region",
        [onnx.helper.make_tensor_value_info(k, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), [None] * v.ndim)
         for k, v in inputs.items()],  # dims open, as numeric.batch types them: later samples may differ in size
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [inits[k] for k in sorted(used_inits)])
    sub = onnx.helper.make_model(g, opset_imports=list(model.opset_import))
    sub.ir_version = model.ir_version
    return sub
