"""The user's metric per stage (``--eval``) on the console: one line per value, stage by stage, with the change
at each transition."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..numeric.summary import MetricSection
from ..report import AuditReport

__all__ = ["render_metric", "metric_lines"]


def _fmt(v) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{v:.4f}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


def metric_lines(m: MetricSection) -> list[tuple[str, str]]:
    """``(text, style)`` lines: per value ``name: stage v -> stage v (change) -> ...`` (the change signed so that a
    negative number is a loss), then the stages not measured and the hook's failures."""
    out = []
    for name in m.names():
        parts, changes = [], {(a, b): c for a, b, c in m.changes(name)}
        prev = None
        for s in m.stages:
            if name not in s.values:
                continue
            step = f"{s.stage} {_fmt(s.values[name])}"
            if prev is not None:
                c = changes.get((prev, s.stage))
                step += f" ({c:+.4f})" if c is not None else ""
            parts.append(step)
            prev = s.stage
        better = "lower is better" if name in m.lower_is_better else "higher is better"
        out.append((f"{name}: " + " -> ".join(parts) + f"   [{better}]", ""))
    for s in m.stages:
        if s.not_run:
            out.append((f"  not measured: {s.stage}: {s.not_run}", "yellow"))
        elif s.error:
            out.append((f"  the hook failed on {s.stage} (N405): {s.error}", "red"))
    left = [s for s in m.stages if s.left_out and not s.error]
    same = len(left) == len(m.stages) > 1 and all(s.left_out == left[0].left_out for s in left)
    for s in left[:1] if same else left:  # one line when every stage left out the same files
        out.append((f"  {'every stage' if same else s.stage}: {len(s.left_out)} sample(s) left out for NaN or "
                    f"infinite values (P209), e.g. {s.left_out[0]}; the values are over the other samples", "yellow"))
    runtimes = list(dict.fromkeys(s.runtime for s in m.stages if s.runtime))
    if runtimes:
        per = ", ".join(f"{s.stage} {s.samples} samples" for s in m.stages if s.runtime)
        out.append((f"  measured by {'; '.join(runtimes)}: {per}", "dim"))
    return out


def render_metric(report: AuditReport, console: Console) -> None:
    """Print the report's metric section (nothing when the run had no ``--eval``)."""
    m = report.metric
    if m is None:
        return
    where = f" on {m.samples}" if m.samples else ""
    console.print(Text(f"\nMetric ({m.hook}{where})", style="bold"), soft_wrap=True)
    for text, style in metric_lines(m):
        console.print(Text(text, style=style), soft_wrap=True)
    if not m.names():
        console.print(Text("  no stage gave a value", style="yellow"))
