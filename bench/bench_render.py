"""Benchmark: the annotated diff graph of a generated ~5,000-node stage pair (and of the sample pipelines).

Builds a residual chain of Conv+BatchNormalization+Relu+Conv+Relu+Add blocks and its onnxruntime-optimized
stage (as ``bench_align.py`` builds its large pair), then times load + align + classify, building the diff
graph (automatic focus and chain collapse engage above ``--max-nodes``) and laying it out as SVG with
Graphviz ``dot``; prints nodes drawn and the SVG size.

Usage: python bench/bench_render.py [--nodes 5000] [--max-nodes 300] [--random N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def generate(n_nodes: int, out_dir: Path) -> list[Path]:
    """The generated pair of ``bench_align.py`` with a chain of kept nodes (Conv -> Relu) in every block."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_align import generate as chain_pair

    return chain_pair(n_nodes, out_dir, kept_chain=True)


def render_case(title: str, paths: list, max_nodes: int, random: int, keep: Path | None) -> None:
    from graphaudit.pipeline import audit, load_pipeline
    from graphaudit.measure import NumericOptions
    from graphaudit.render.diffgraph import build_diff_graph

    t0 = time.perf_counter()
    au = audit(load_pipeline(paths))
    t1 = time.perf_counter()
    if random:
        au = audit(au.stages, numeric=NumericOptions(random=random, isolated=False))
    t2 = time.perf_counter()
    for pair in [*range(len(au.stages) - 1), None]:
        t3 = time.perf_counter()
        src = au.diff_source()
        g = build_diff_graph(src, pair=pair, max_nodes=max_nodes)
        t4 = time.perf_counter()
        svg = g.svg()
        t5 = time.perf_counter()
        if keep is not None:
            g.write(keep / f"{title.split()[0]}_{'lineage' if pair is None else pair}.svg")
        view = "lineage" if pair is None else f"pair {pair}"
        print(f"{title[:34]:34} {view:8} {g.total_nodes:>6} {g.node_count:>6} {str(g.focused):>7} {g.collapsed:>9} "
              f"{t1 - t0:>8.2f} {t2 - t1:>8.2f} {t4 - t3:>7.2f} {t5 - t4:>7.2f} {len(svg) / 1e6:>7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000, help="nodes of the generated original stage")
    ap.add_argument("--max-nodes", type=int, default=300, help="build_diff_graph's max_nodes")
    ap.add_argument("--random", type=int, default=0, help="also run N random samples (numeric shading)")
    ap.add_argument("--keep", type=Path, help="write the SVGs into this directory")
    args = ap.parse_args()
    from graphaudit.samples import bundled_pipelines

    print(f"{'case':34} {'view':8} {'total':>6} {'drawn':>6} {'focused':>7} {'collapsed':>9} "
          f"{'audit s':>8} {'data s':>8} {'build s':>7} {'dot s':>7} {'SVG MB':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        gen = generate(args.nodes, Path(tmp))
        render_case(f"generated ({args.nodes} nodes)", gen, args.max_nodes, args.random, args.keep)
    for title, paths in bundled_pipelines():
        render_case(title or str(paths[0]), paths, args.max_nodes, 0, args.keep)


if __name__ == "__main__":
    main()
