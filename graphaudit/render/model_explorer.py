"""Model Explorer export: stage graphs, node mappings between stages, and change/error overlays as JSON files.

Overlays are Model Explorer "node data" files (``{graph id: {"name", "results": {node id: {"value", "bgColor"}},
...}}``, ``model_explorer.node_data_builder.ModelNodeData``). Only measured quantities are numbers there (cosine,
SQNR, isolated SQNR): the side panel's aggregated stats (min, max, sum, avg) are computed over numeric values. A
change kind is a label: its ``value`` is the kind's name and its ``bgColor`` the kind's colour, which the web app
shows as the node's text and colour, and counts per label on collapsed layers. Sources:
``NodeDataProviderResultData.value: any`` in ``src/ui/src/components/visualizer/common/types.ts`` of
https://github.com/google-ai-edge/model-explorer; ``showExpandedSummaryOnGroupNode`` and
``showLabelCountColumnsInChildrenStatsTable`` ("only works with non-numerical (e.g. string) node data values") in
``model_explorer/node_data_builder.py`` of the ``ai-edge-model-explorer`` package; its web app (0.1.34,
``populateResultsTable``) adds a value to the stats only when ``typeof value == "number"``.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from ..fileio import write_atomic
from ..stage import StageGraph
from .diffgraph import KIND_COLORS as _DIFF_COLORS

__all__ = ["CHANGE_LABELS", "KIND_COLORS", "SQNR_CAP_DB", "stage_graph", "node_mapping", "change_overlays",
           "error_overlays", "write_model_explorer"]

#: Change kinds in the change overlay, least to most telling: a node in several changes is labelled with the last
#: of its kinds in this order. The labels are the kinds' names (strings, not codes a stats panel would sum).
CHANGE_LABELS = ("kept", "modified", "inserted", "removed", "fused", "replaced", "unmatched")

#: Background colour of each change kind: the fill colours of the diff graph (and so of the HTML report).
KIND_COLORS = {k: _DIFF_COLORS[k][0] for k in CHANGE_LABELS}

#: SQNR overlay values above this (and identical tensors, SQNR = inf) are written as this value, in dB
#: (JSON has no infinity).
SQNR_CAP_DB = 150.0

_MAX_ATTR = 200


def _short(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    return s if len(s) <= _MAX_ATTR else s[:_MAX_ATTR - 3] + "..."


def _io_ids(st: StageGraph) -> tuple[dict[str, str], dict[str, str]]:
    taken = set(st.nodes)

    def free(base: str) -> str:
        key, i = base, 1
        while key in taken:
            key, i = f"{base}#{i}", i + 1
        taken.add(key)
        return key

    return ({t: free(f"input:{t}") for t in st.inputs}, {t: free(f"output:{t}") for t in st.outputs})


def _tensor_attrs(st: StageGraph, t: str) -> list[dict[str, Any]]:
    info = st.tensors.get(t)
    attrs = [{"key": "tensor_name", "value": t}]
    if info is not None:
        if info.dtype:
            attrs.append({"key": "dtype", "value": info.dtype})
        if info.shape is not None:
            attrs.append({"key": "shape", "value": "[" + ", ".join("?" if d is None else str(d)
                                                                  for d in info.shape) + "]"})
        if info.is_param:
            attrs.append({"key": "kind", "value": info.kind})
    return attrs


def stage_graph(st: StageGraph) -> dict[str, Any]:
    """One stage as a Model Explorer graph collection (the JSON its built-in JSON adapter loads).

    Node ids are graphaudit node ids (:attr:`graphaudit.stage.NodeInfo.id`), so overlays and mappings
    written by this module refer to them; graph inputs and outputs become ``input:<tensor>`` and
    ``output:<tensor>`` nodes. Namespaces follow ``/`` in node names (PyTorch exports) and the owning
    node of subgraph nodes. Initializers are not drawn; they appear in ``inputsMetadata``.

    Returns
    -------
    dict
        ``{"label": file name, "graphs": [{"id": stage name, "nodes": [...]}]}``, the layout of
        ``model_explorer.graph_builder.GraphCollection``.
    """
    ins, outs = _io_ids(st)
    nodes: list[dict[str, Any]] = [{"id": ins[t], "label": "Input", "namespace": "",
                                    "attrs": [{"key": "name", "value": t}],
                                    "outputsMetadata": [{"id": "0", "attrs": _tensor_attrs(st, t)}]}
                                   for t in st.inputs]

    def source(t: str) -> dict[str, str] | None:
        info = st.tensors.get(t)
        if info is not None and info.producer is not None and info.producer in st.nodes:
            return {"sourceNodeId": info.producer, "sourceNodeOutputId": str(st.nodes[info.producer].outputs.index(t))}
        if t in ins:
            return {"sourceNodeId": ins[t], "sourceNodeOutputId": "0"}
        return None

    for n in st.nodes.values():
        edges, in_meta = [], []
        for j, t in enumerate(n.inputs):
            if not t:
                continue
            src = source(t)
            if src is not None:
                edges.append({**src, "targetNodeInputId": str(j)})
            in_meta.append({"id": str(j), "attrs": _tensor_attrs(st, t)})
        if n.parent is not None:
            namespace = n.id.rsplit("/", 1)[0]
        else:
            namespace = "/".join(p for p in n.name.split("/")[:-1] if p) if "/" in n.name else ""
        attrs = [{"key": "op_type", "value": n.qualified_op}, {"key": "name", "value": n.name}]
        attrs += [{"key": k, "value": _short(v)} for k, v in sorted(n.attributes.items())]
        nodes.append({"id": n.id, "label": n.op_type, "namespace": namespace, "attrs": attrs,
                      "incomingEdges": edges, "inputsMetadata": in_meta,
                      "outputsMetadata": [{"id": str(k), "attrs": _tensor_attrs(st, t)}
                                          for k, t in enumerate(n.outputs) if t]})
    for t in st.outputs:
        src = source(t)
        nodes.append({"id": outs[t], "label": "Output", "namespace": "", "attrs": [{"key": "name", "value": t}],
                      "incomingEdges": [{**src, "targetNodeInputId": "0"}] if src else []})
    return {"label": Path(st.path).name, "graphs": [{"id": st.name, "nodes": nodes}]}


def node_mapping(a: StageGraph, b: StageGraph, transition: dict[str, Any]) -> dict[str, Any]:
    """Node mapping between two stages for Model Explorer's split view ("sync navigation").

    One entry per change that has nodes on both sides (kept, modified, fused, replaced) with the a
    stage's nodes on the left and b's on the right; graph inputs/outputs of the same name map to
    each other. Inserted and removed nodes have no counterpart and are left out.

    Parameters
    ----------
    transition : dict
        The report's transition record (``AuditReport.to_dict()["transitions"][i]``).

    Returns
    -------
    dict
        ``{"mappingEntries": [{"leftNodeIds", "rightNodeIds"}], "showDiffHighlights": true}``, the layout
        the Model Explorer web app reads from an uploaded mapping file.
    """
    entries = [{"leftNodeIds": list(c["a_nodes"]), "rightNodeIds": list(c["b_nodes"])}
               for c in transition["changes"] if c["a_nodes"] and c["b_nodes"]]
    for ia, ib in zip(_io_ids(a), _io_ids(b)):
        entries += [{"leftNodeIds": [ia[t]], "rightNodeIds": [ib[t]]} for t in ia if t in ib]
    return {"mappingEntries": entries, "showDiffHighlights": True}


def _graph_data(name: str, results: dict[str, dict[str, Any]], gradient: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "results": results}
    if gradient:
        d["gradient"] = [{"stop": 0, "bgColor": "#c0262d"}, {"stop": 0.5, "bgColor": "#f6d58e"},
                         {"stop": 1, "bgColor": "#9fd8ab"}]
    return d


def change_overlays(a: StageGraph, b: StageGraph, transition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Change kind of every node of both stages of a transition, as Model Explorer node data.

    Each result is a label, not a number: ``{"value": kind, "bgColor": its colour}`` (:data:`CHANGE_LABELS`,
    :data:`KIND_COLORS`); the overlay is kept out of the aggregated stats table (``hideInAggregatedStatsTable``) and
    collapsed layers list their nodes' kinds with counts (``showExpandedSummaryOnGroupNode``,
    ``showLabelCountColumnsInChildrenStatsTable``).

    Returns
    -------
    dict
        ``{a.name: GraphNodeData, b.name: GraphNodeData}`` in the JSON layout of
        ``model_explorer.node_data_builder.ModelNodeData`` (graph id -> ``{"name", "results", ...}``).
    """
    rank = {k: i for i, k in enumerate(CHANGE_LABELS)}
    side: dict[str, dict[str, dict[str, Any]]] = {a.name: {}, b.name: {}}
    for c in transition["changes"]:
        for st, ids in ((a, c["a_nodes"]), (b, c["b_nodes"])):
            for nid in ids:
                prev = side[st.name].get(nid)
                if prev is None or rank[prev["value"]] < rank[c["kind"]]:
                    side[st.name][nid] = {"value": c["kind"], "bgColor": KIND_COLORS[c["kind"]]}
    return {st.name: {**_graph_data(f"change {a.name} -> {b.name}", side[st.name]),
                      "hideInAggregatedStatsTable": True, "showExpandedSummaryOnGroupNode": True,
                      "showLabelCountColumnsInChildrenStatsTable": True} for st in (a, b)}


def _metric(v: Any, cap: float | None = None) -> float | None:
    if v is None:
        return None
    x = float(v)
    if math.isnan(x):
        return None
    return min(x, cap) if cap is not None else x


def error_overlays(b: StageGraph, numeric: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Numeric error of a transition on the later stage's nodes, as Model Explorer node data.

    Accumulated cosine similarity and SQNR (dB, capped at :data:`SQNR_CAP_DB`) go on the node producing
    each compared tensor; the isolated SQNR of each measured change (the report keeps the worst) on
    every node of the change.

    Parameters
    ----------
    b : StageGraph
        The later stage of the transition.
    numeric : dict
        The report's ``numeric`` entry of the transition (schema 1.1).

    Returns
    -------
    dict
        Overlay name -> ``GraphNodeData`` JSON (``{"name", "results", "gradient"}``) for the graph ``b.name``.
    """
    tag = f"{numeric['a']} -> {numeric['b']}"
    cos: dict[str, dict] = {}
    sqnr: dict[str, dict] = {}
    for t in numeric.get("tensors", []):
        info = b.tensors.get(t["b_tensor"])
        prod = info.producer if info is not None else None
        c, s = _metric(t.get("cosine")), _metric(t.get("sqnr_db"), SQNR_CAP_DB)
        if prod is None or c is None:
            continue
        if prod not in cos or c < cos[prod]["value"]:
            cos[prod] = {"value": c}
            if s is not None:
                sqnr[prod] = {"value": s}
    iso: dict[str, dict] = {}
    for r in numeric.get("worst_regions", []):
        s = _metric(r.get("sqnr_db"), SQNR_CAP_DB)
        for nid in r.get("b_nodes", []):
            if s is not None and nid in b.nodes and (nid not in iso or s < iso[nid]["value"]):
                iso[nid] = {"value": s}
    out = {"cosine_accumulated": _graph_data(f"cosine, accumulated ({tag})", cos, gradient=True),
           "sqnr_accumulated": _graph_data(f"SQNR dB, accumulated ({tag})", sqnr, gradient=True)}
    if iso:
        out["sqnr_isolated"] = _graph_data(f"SQNR dB, isolated, worst changes ({tag})", iso, gradient=True)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "stage"


def _write(path: Path, data: Any, protect: list[Path] | None) -> Path:
    return write_atomic(path, data if isinstance(data, str) else json.dumps(data, indent=1, allow_nan=False) + "\n",
                        protect)


def write_model_explorer(au, directory: str | os.PathLike, protect: list[Path] | None = None) -> list[Path]:
    """Write the Model Explorer files of an audit into an existing directory.

    Files: ``<i>_<stage>.json`` per stage (graph, :func:`stage_graph`); per transition
    ``mapping_<i>_<a>__<j>_<b>.json`` (:func:`node_mapping`), ``changes_<i>_<a>__<j>_<b>.json`` (:func:`change_overlays`,
    one file holding both graphs' data) and, with numeric results, ``<overlay>_<a>__<b>.json``
    (:func:`error_overlays`, keyed by b's graph id); and ``README.txt`` saying how to open them.

    Parameters
    ----------
    au : graphaudit.pipeline.Audit
    directory : path-like
    protect : list of Path
        The user's inputs, never overwritten.

    Returns
    -------
    list of Path
        The files written.

    Raises
    ------
    GraphAuditError
        A target is an input file, or cannot be written.
    """
    d = Path(directory)
    rep = au.report.to_dict()
    written = []
    names = [f"{i}_{_slug(st.name)}.json" for i, st in enumerate(au.stages)]
    for st, name in zip(au.stages, names):
        written.append(_write(d / name, stage_graph(st), protect))
    numeric = {(n["a"], n["b"]): n for n in rep.get("numeric") or []}
    howto = []
    for i, (a, b, tr) in enumerate(zip(au.stages, au.stages[1:], rep["transitions"])):
        pair = f"{names[i][:-5]}__{names[i + 1][:-5]}"  # indexed: stages may share a name (m.onnx in two dirs)
        written.append(_write(d / f"mapping_{pair}.json", node_mapping(a, b, tr), protect))
        written.append(_write(d / f"changes_{pair}.json", change_overlays(a, b, tr), protect))
        overlays = [f"changes_{pair}.json"]
        n = numeric.get((a.name, b.name))
        if n is not None:
            for key, data in error_overlays(b, n).items():
                written.append(_write(d / f"{key}_{pair}.json", {b.name: data}, protect))
                overlays.append(f"{key}_{pair}.json")
        howto.append(f"{a.name} -> {b.name}:\n  model-explorer {names[i]} "
                     f"{names[i + 1]} --node_data_paths={','.join(overlays)}\n"
                     f"  then open both graphs side by side and upload mapping_{pair}.json under "
                     f"'sync navigation' (mode: upload mapping).")
    readme = ("Model Explorer files written by graphaudit (pip install ai-edge-model-explorer).\n"
              "Stage graphs load with Model Explorer's built-in JSON adapter; node ids are graphaudit node ids.\n"
              "Change overlays label each node with its change kind (text and colour, not a number); the cosine and "
              "SQNR overlays hold numbers.\n"
              f"SQNR overlays are in dB, capped at {SQNR_CAP_DB:g} (identical tensors).\n\n" + "\n".join(howto) + "\n")
    written.append(_write(d / "README.txt", readme, protect))
    return written
