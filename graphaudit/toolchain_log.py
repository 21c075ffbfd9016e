"""Put a Horizon log's per-node similarity into a report, mapped onto the stages, beside graphaudit's cosine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import GraphAuditError
from .jsonvalues import json_number
from .stage import StageGraph
from .numeric.summary import TensorSummary, TransitionSummary
from .toolchains.hblog import (TABLE_STAGE_ROLES, NodeRow, ToolchainLog, find_toolchain_files, parse_log,
                               parse_quant_info)
from .toolchains.ops import QUANT_CHAIN_OPS, rescales_channels
from .toolchains.section import ToolchainNode, ToolchainOutput, ToolchainSection

__all__ = ["load_toolchain_file", "toolchain_section", "pick_toolchain_file", "toolchain_candidates",
           "read_toolchain_log"]


def load_toolchain_file(path: str | os.PathLike) -> ToolchainLog:
    """Parse a log (:func:`parse_log`) or, for a ``.json`` file, a quant_info file (:func:`parse_quant_info`).

    Raises
    ------
    GraphAuditError
    """
    p = Path(path)
    return parse_quant_info(p) if p.suffix.lower() == ".json" else parse_log(p)


def toolchain_candidates(paths: list[str | os.PathLike]) -> list[Path]:
    """The toolchain side files beside the stage paths the user gave (see :func:`find_toolchain_files`), best first:
    makertbin / hb_compile logs, then quant_info files, then the other hb_mapper logs (a checker log has no
    similarity); an empty list without paths or files. Nothing is parsed: the caller reads them in this order and
    falls back to the next when one cannot be read."""
    if not paths:
        return []
    found = find_toolchain_files(Path(paths[0]))
    converting = [p for p in found.logs if p.name.startswith(("hb_mapper_makertbin", "hb_compile"))]
    return converting + found.quant_info + [p for p in found.logs if p not in converting]


def pick_toolchain_file(paths: list[str | os.PathLike]) -> Path | None:
    """The best toolchain side file for the stage paths the user gave: the first of :func:`toolchain_candidates`
    (a makertbin / hb_compile log, else a quant_info file, else another hb_mapper log), else None. Nothing is
    parsed."""
    return next(iter(toolchain_candidates(paths)), None)


def read_toolchain_log(stages: list[StageGraph], log: str | os.PathLike | None = None,
                       paths: list[str | os.PathLike] | None = None) -> tuple[ToolchainLog | None, Path | None,
                                                                               str | None]:
    """The toolchain log given (``log``) or found beside the stage ``paths``, parsed and checked to name a node of
    ``stages``, as ``(log, its path, why found files were left out)``.

    A log given that cannot be read, or none of whose node rows names a node of the stages (a log of another model),
    is refused. Found ones are tried in the order of :func:`toolchain_candidates`: one that cannot be read or is of
    another model is left out and the next is tried; the third value says each one left out, with why, and what was
    read instead (None when the first was read or nothing was found) -- the report's ``run.log_skipped``.

    Raises
    ------
    GraphAuditError
        Only for ``log``: unreadable, not a toolchain log, or of another model (one line naming the file).
    """
    if log:
        tlog = load_toolchain_file(log)
        foreign = _foreign_log(tlog, stages, log)
        if foreign:
            raise GraphAuditError(foreign)
        return tlog, Path(log), None
    skipped: list[str] = []
    for found in toolchain_candidates(paths or []):
        try:
            tlog = load_toolchain_file(found)
        except GraphAuditError as e:
            skipped.append(str(e))
            continue
        foreign = _foreign_log(tlog, stages, found) or _other_build(tlog, stages, found)
        if foreign:
            skipped.append(foreign)
            continue
        return tlog, found, _skipped_logs(skipped, found)
    return None, None, _skipped_logs(skipped, None)


def _foreign_log(tlog: ToolchainLog, stages: list[StageGraph], path) -> str | None:
    """Why ``tlog`` is of another model (it has node rows and none names a node of the stages), else None."""
    probe = toolchain_section(tlog, stages, None)
    if probe.nodes_total and not probe.nodes_mapped:
        return (f"{path}: none of its {probe.nodes_total} node rows names a node of the stages: "
                "a log of another model?")
    return None


def _other_build(tlog: ToolchainLog, stages: list[StageGraph], path) -> str | None:
    """Why a log found beside the stages is of another build of their model, else None: the config it echoes writes
    into a ``working_dir`` that exists (resolved against the log's directory, where hb_mapper runs and writes its
    log) and is not the directory holding the stages, or names an ``output_model_file_prefix`` none of the stage
    files carries. Two builds in one project folder share the log's name, ``hb_mapper_makertbin.log``, and the
    later one overwrites it; their node names mostly agree, so the rows alone do not tell (a new user's second
    PP-OCRv4 rec build, ``working_dir: model_output_fix``: 195 of 229 rows named nodes of ``model_output``)."""
    if not tlog.config_text:
        return None
    from .config import parse_config_text

    try:
        cfg = parse_config_text(tlog.config_text, str(path))
    except GraphAuditError:
        return None  # an echo that does not parse says nothing about the build
    wd, prefix = cfg.get("model_parameters", "working_dir"), cfg.get("model_parameters", "output_model_file_prefix")
    homes = {Path(st.path).resolve().parent for st in stages}
    if isinstance(wd, str) and wd.strip():
        w = Path(wd) if Path(wd).is_absolute() else Path(path).parent / wd
        if w.is_dir() and w.resolve() not in homes:
            return (f"{path}: the config it echoes writes the stages to working_dir {wd!r} ({w}), not to the "
                    "directory of these stages: a log of another build?")
    if isinstance(prefix, str) and prefix and not any(Path(st.path).name.startswith(f"{prefix}_") for st in stages):
        return (f"{path}: the config it echoes names output_model_file_prefix {prefix!r}, which no stage file "
                "carries: a log of another build?")
    return None


def _skipped_logs(reasons: list[str], used: Path | None) -> str | None:
    """``run.log_skipped``: the found toolchain files left out, each with why, and what was read instead."""
    if not reasons:
        return None
    how = f"read {used} instead" if used is not None else "--no-log skips it"
    return "; ".join(reasons) + f" (found beside the stages; left out, {how})"


def _map_stage(stages: list[StageGraph]) -> StageGraph | None:
    for role in TABLE_STAGE_ROLES:
        for st in stages:
            if st.role == role:
                return st
    return None


def _node_id(row: NodeRow, by_name: dict[str, str], names: list[str], st: StageGraph) -> str | None:
    """Stage node id of a table row: by name; a cut name (``...`` + end) by unique suffix; a 3.x display
    name ``Conv+Relu`` by its last part; a quant_info row by the producer of its first output."""
    if row.node in by_name:
        return by_name[row.node]
    if row.truncated:
        hits = [n for n in names if n.endswith(row.node)]
        return by_name[hits[0]] if len(hits) == 1 else None
    if "+" in row.node and row.node.rsplit("+", 1)[1] in by_name:
        return by_name[row.node.rsplit("+", 1)[1]]
    if row.outputs and row.outputs[0] in st.tensors:
        return st.tensors[row.outputs[0]].producer
    return None


def _row_note(row: NodeRow, st: StageGraph | None, node_id: str | None, gfirst,
              tr: TransitionSummary | None) -> str:
    """Why a row's graphaudit figure is missing or measures another quantity than the toolchain's ("" when it is
    the same quantity)."""
    if row.cosine is None:
        return "the toolchain prints no cosine for this node"
    if st is None or node_id is None:
        return f"no node of this name in {st.name if st else 'the stages'}"
    if tr is None and gfirst is None:
        return "no numeric run"
    outs = st.nodes[node_id].outputs
    for t in _wrapped(st, outs[0])[1:] if outs else []:
        n = st.nodes.get(st.tensors[t].producer or "")
        if n is not None and rescales_channels(n):
            return ("its HzCalibration also rescales channels (channel_scales): the toolchain compares the rescaled "
                    "value with fake quantization on and off, graphaudit's reference stage holds it unscaled")
    return "" if gfirst is not None else "graphaudit did not compare this node's output"


def _wrapped(st: StageGraph, tensor: str) -> list[str]:
    """``tensor`` and the outputs of the single-consumer wrapper chain on it (HzCalibration, Q/DQ)."""
    chain = [tensor]
    while len(chain) < 8:
        cons = st.tensors[chain[-1]].consumers if chain[-1] in st.tensors else []
        nxt = [st.nodes[c].outputs[0] for c, _slot in cons if st.nodes[c].op_type in QUANT_CHAIN_OPS
               and st.nodes[c].outputs]
        if len(nxt) != 1:
            break
        chain.append(nxt[0])
    return chain


def _numeric_for(numeric: list[TransitionSummary] | None, stage: str) -> TransitionSummary | None:
    """The numeric transition that ends at ``stage`` (optimized -> calibrated when mapping to calibrated)."""
    for tr in numeric or []:
        if tr.b == stage:
            return tr
    return None


def _graphaudit_cosine(tr: TransitionSummary | None, by_a: dict, by_b: dict, st: StageGraph, node_id: str | None,
                       name: str) -> tuple[Any, str | None, Any]:
    """(cosine over all samples, b tensor, cosine of the first sample) of graphaudit's numeric entry for a node's
    first output, preferring the wrapped (fake-quantized) value, which is what the toolchain compares."""
    e = _graphaudit_entry(tr, by_a, by_b, st, node_id, name)
    if e is None:
        return None, None, None
    return e.cosine, e.b_tensor, e.first_sample_cosine


def _graphaudit_entry(tr: TransitionSummary | None, by_a: dict, by_b: dict, st: StageGraph, node_id: str | None,
                      name: str) -> TensorSummary | None:
    if tr is None:
        return None
    outs = list(st.nodes[node_id].outputs) if node_id else []
    if not outs and name in st.tensors:  # output tables of hb_mapper 1.18 name graph outputs
        outs = [name]
    if not outs:
        return None
    chain = _wrapped(st, outs[0])
    for t in reversed(chain):
        if t in by_b:
            return by_b[t]
    hit = by_a.get(outs[0])  # the stage mapped to is the reference (a) of the transition
    return hit if hit is not None and hit.b_tensor in chain + [outs[0]] else None


def toolchain_section(log: ToolchainLog, stages: list[StageGraph],
                      numeric: list[TransitionSummary] | None = None) -> ToolchainSection:
    """The report's ``toolchain`` section: the log's rows mapped onto a stage, with graphaudit's cosine.

    Parameters
    ----------
    log : ToolchainLog
    stages : list of StageGraph
        The pipeline; rows are mapped onto the calibrated stage (else optimized, ptq, quantized) by
        node name (``node_id`` None when no node of that name exists there).
    numeric : list of TransitionSummary, optional
        ``report.numeric`` (:func:`graphaudit.numeric.summary.transition_summary`). The entry
        ending at the mapped stage (optimized -> calibrated) gives ``graphaudit_cosine`` of the node's
        first output (after its HzCalibration when it has one), on graphaudit's samples.

    Returns
    -------
    ToolchainSection
        Cosines are floats, ``"nan"`` or None.
    """
    st = _map_stage(stages)
    by_name = {n.name: n.id for n in st.nodes.values() if n.name} if st else {}
    names = sorted(by_name)
    tr = _numeric_for(numeric, st.name) if st else None
    by_a = {t.a_tensor: t for t in (tr.tensors if tr is not None else [])}
    by_b = {t.b_tensor: t for t in (tr.tensors if tr is not None else [])}
    nodes = []
    for row in log.nodes:
        nid = _node_id(row, by_name, names, st) if st else None
        gcos, gt, gfirst = _graphaudit_cosine(tr, by_a, by_b, st, nid, row.node) if st else (None, None, None)
        nodes.append(ToolchainNode(node=row.node, truncated=row.truncated, line=row.line, node_id=nid, on=row.on,
                                   subgraph=row.subgraph, type=row.type, cosine=json_number(row.cosine),
                                   threshold=json_number(row.threshold), dtype=row.dtype, extra=dict(row.extra),
                                   graphaudit_cosine=gcos, graphaudit_tensor=gt, graphaudit_first_sample_cosine=gfirst,
                                   graphaudit_note=_row_note(row, st, nid, gfirst, tr)))
    outputs = []
    for o in log.outputs:
        tensor = o.output if st and o.output in st.tensors else None
        if st and tensor is None and o.output in by_name:  # hb_mapper 1.18 names the output's node
            outs = st.nodes[by_name[o.output]].outputs
            tensor = outs[0] if outs else None
        gcos = gfirst = None
        if tr is not None and tensor is not None:
            hit = next((t for t in tr.outputs if tensor in (t.b_tensor, t.a_tensor)), None)
            gcos, gfirst = (hit.cosine, hit.first_sample_cosine) if hit is not None else (None, None)
        outputs.append(ToolchainOutput(output=o.output, line=o.line, tensor=tensor, cosine=json_number(o.cosine),
                                       l1=json_number(o.l1), l2=json_number(o.l2), chebyshev=json_number(o.chebyshev),
                                       extra=dict(o.extra), graphaudit_cosine=gcos,
                                       graphaudit_first_sample_cosine=gfirst))
    return ToolchainSection(source=log.path, tool=log.tool, toolchain_version=log.toolchain_version,
                            horizon_nn_version=log.horizon_nn_version, hbdk_version=log.hbdk_version,
                            config_line=log.config_line, stage=st.name if st else None,
                            compared=f"{tr.a} -> {tr.b}" if tr is not None else None,
                            nodes_total=len(nodes), nodes_mapped=sum(n.node_id is not None for n in nodes),
                            nodes=nodes, outputs=outputs, warnings=list(log.warnings))

