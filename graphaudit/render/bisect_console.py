"""Console rendering of ``graphaudit bisect``: the search as it runs, then the steps and the final set."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..bisect_report import BisectReport
from .text import print_line, printable

__all__ = ["render_bisect", "render_bisect_start", "render_bisect_step", "render_fix"]

#: Node names shown per unit before "... N more".
_NAMES = 3

#: Samples below which the output-SQNR oracle gets a caution line. Measured on onnxruntime's QDQ PP-OCR cls
#: (optimized -> quantized, bundled samples data/ppocr_cls/x cut into disjoint groups): on 4 samples the four groups
#: measured b at 26.4 dB, 38.5 dB and twice at 60 dB or more (no drop to bisect at all), the chosen sets 64 and 89
#: units; on 8 samples both groups found the drop (29.7 and 41.5 dB, 29 and 74 units); on all 16, 32.5 dB and 37
#: units. Below 8 even whether there is a drop depends on the samples; 8 is bisect's default.
FEW_SAMPLES = 8


def _db(x: float) -> str:
    return "inf" if x == math.inf else ("n/a" if not math.isfinite(x) else f"{x:.1f}")


def _value(rep: BisectReport, x: float) -> str:
    """A metric value: dB with one decimal, the user's metric with four significant digits."""
    return _db(x) if "SQNR" in rep.metric else ("n/a" if not math.isfinite(x) else f"{x:.4g}")


def _share(x: float) -> str:
    """A share of the drop as a percentage, 7 characters wide; "n/a" for NaN or an infinity."""
    return f"{x:7.1%}" if math.isfinite(x) else f"{'n/a':>7}"


def render_bisect_start(units: int, not_revertible: int, budget: int, samples: int, fix_budget: int,
                        console: Console) -> None:
    """The search's size and its stated budget, before the first hybrid runs: the search's ``budget`` and, where the
    fix may be hb_mapper's int16, the ``fix_budget`` evaluations of its prediction and second search (the total
    is the bound of the whole run)."""
    fix = (f" (and at most {fix_budget} more of int16 models to predict the fix and search it again: "
           f"{budget + fix_budget} in all)" if fix_budget else "")
    print_line(console, Text(f"bisect: {units} revertible unit{'s' if units != 1 else ''}"
                       + (f" ({not_revertible} change(s) not revertible)" if not_revertible else "")
                       + f"; at most {budget} hybrid evaluations{fix} on {samples} sample{'s' if samples != 1 else ''}",
                       style="dim"))


def render_bisect_step(step, console: Console) -> None:
    """One hybrid evaluation as it finishes (``step``: a :class:`graphaudit.numeric.grouptest.BisectStep`)."""
    print_line(console, Text(f"  {step.phase:<6} {len(step.units):>5} unit(s) reverted -> {_share(step.recovered)} of the "
                       f"drop recovered" + ("  (kept)" if step.kept and step.phase != "ends" else ""), style="dim"))


def _names(names: list[str]) -> str:
    shown = ", ".join(printable(n) for n in names[:_NAMES])
    return shown + (f" ... {len(names) - _NAMES} more" if len(names) > _NAMES else "")


def render_bisect(rep: BisectReport, console: Console) -> None:
    """The transition's drop, the final set (its units with their nodes and isolated SQNR) and what it recovers."""
    console.print()
    where = f" on {rep.samples} sample(s)" if "SQNR" in rep.metric else ""
    print_line(console, Text(f"{rep.a} -> {rep.b}: {rep.metric} {_value(rep, rep.metric_a)} -> {_value(rep, rep.metric_b)}"
                       f"{where} ({rep.runtime}); {len(rep.steps)} of at most {rep.budget} hybrid evaluations"
                       + (f", {rep.fix_evaluations} of at most {rep.fix_budget} of int16 models" if rep.fix_budget
                          else ""),
                       style="bold"))
    if rep.data_unreadable:
        n = len(rep.data_unreadable)
        console.print(Text(f"{n} data file(s) could not be read or fed and were left out: "
                           + "; ".join(rep.data_unreadable[:3]) + (f"; and {n - 3} more" if n > 3 else ""),
                           style="yellow"))
    if "SQNR" in rep.metric and rep.samples < FEW_SAMPLES:
        print_line(console, Text(f"Caution: {rep.samples} sample(s) only: the output SQNR of so few samples swings with which "
                           "samples they are (on 4 samples of PP-OCR cls, disjoint groups measured 26 dB, 38 dB and no "
                           f"drop at all), and the units chosen with it; give {FEW_SAMPLES} or more (--max-samples N, or more data).",
                           style="yellow"))
    if not rep.reached and not math.isfinite(rep.recovered):
        print_line(console, Text(f"Reverting every revertible unit gives {rep.metric} {_value(rep, rep.metric_chosen)}: "
                           "not a number (the hybrid's outputs, or the metric on them, are NaN or infinite), so no "
                           "share of the drop can be measured.", style="yellow"))
    elif not rep.reached:
        print_line(console, Text(f"Reverting every revertible unit recovers {rep.recovered:.1%} of the drop, below the "
                           f"target {rep.target:.0%}: the rest is in changes that cannot be reverted "
                           f"({rep.not_revertible}) or in how the changes interact.", style="yellow"))
    t = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("unit", "kind", "pattern", f"{rep.b} nodes", "isolated SQNR dB"):
        t.add_column(col, overflow="fold")
    for k in rep.chosen:
        u = rep.units[k]
        t.add_row(str(k), u.kind, printable(u.pattern), _names(u.b_nodes or u.a_nodes),
                  _db(u.isolated_sqnr_db) if u.isolated_sqnr_db is not None else "-")
    console.print(t)
    print_line(console, Text(f"Reverting these {len(rep.chosen)} unit(s) recovers {_share(rep.recovered).strip()} of the drop "
                       f"(target {rep.target:.0%}): {rep.metric} {_value(rep, rep.metric_b)} -> "
                       f"{_value(rep, rep.metric_chosen)}."))
    if rep.fix_units != rep.chosen and rep.fix_units:
        print_line(console, Text(f"int16 at those units would keep their error (clipping at the calibrated thresholds "
                           f"stays in int16); searched again with int16 as the fix does: units "
                           f"{', '.join(map(str, rep.fix_units))}", style="yellow"))
    weak = rep.fix_recovered is not None and rep.fix_recovered < rep.recovered / 2
    render_fix(rep.fix, console, weak)
    if rep.fix_recovered is not None:
        worse = " (the outputs move further from a than b's)" if rep.fix_recovered < 0 else ""
        print_line(console, Text(f"  predicted with the fix (measured on b as hb_mapper builds it: those tensors in int16 "
                           f"at the same thresholds, with hb_mapper's int16 propagation): {rep.fix_recovered:.1%} of "
                           f"the drop{worse}" + (
                               "; int16 keeps what clips at the calibrated thresholds: recalibrate those tensors "
                               "(calibration_type max, or a higher max_percentile) or run their consumers on the "
                               "CPU" if weak else ""), style="yellow" if weak else "dim"))


def render_fix(fix: dict | None, console: Console, weak: bool = False) -> None:
    """The setting to paste (``BisectReport.fix``) and its lint findings; ``weak``: its predicted recovery is under
    half of the reverted units' (headed as a setting to try, not a fix)."""
    if not fix:
        return
    console.print()
    if not fix.get("text"):
        print_line(console, Text(fix.get("note", ""), style="dim"))
        return
    head = (f"int16 setting ({fix['toolchain']}), predicted below to recover little: {fix['note']}" if weak
            else f"Fix ({fix['toolchain']}): {fix['note']}")
    print_line(console, Text(head, style="bold"))
    console.print(Text(fix["text"].rstrip()), soft_wrap=True)
    for line in fix.get("lint", []):
        console.print(Text(f"  lint: {printable(line)}", style="yellow"), soft_wrap=True)
    if fix["toolchain"] == "hb_mapper" and not fix.get("lint"):
        print_line(console, Text("  lint: no finding on node_info (names checked against the optimized_float stage)",
                           style="dim"))
