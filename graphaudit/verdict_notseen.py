"""The verdict's ``not-seen`` lines: what graphaudit could not measure (a stage not run, no data, one stage only, the
compiled model and the device), built from the report alone like the rest of :mod:`graphaudit.verdict`."""

from __future__ import annotations

from .report import AuditReport, VerdictLine
from .toolchains.ops import HORIZON_DOMAIN
from .verdict_toolchain import toolchain_log_figures

__all__ = ["not_seen_lines", "sentence", "is_horizon"]


def sentence(text: str) -> str:
    """``text`` ending in one full stop (or its own question mark)."""
    return text if text.endswith(("?", ".", "!")) else text + "."


def is_horizon(report: AuditReport, stage: str) -> bool:
    """Whether stage ``stage`` of ``report`` holds any op of Horizon's domain."""
    return any(s.name == stage and any(op.startswith(f"{HORIZON_DOMAIN}::") for op in s.custom_ops)
               for s in report.stages)


#: What to do with a pipeline of one stage (a single model file, or a folder holding one stage).
_ONE_STAGE_ACTION = ("Give the other stages of the conversion too (the stage folder, or every stage file in pipeline "
                     "order), to see what changed and where the numbers part.")


def not_seen_lines(report: AuditReport) -> list[VerdictLine]:
    """The ``not-seen`` verdict lines of ``report``, in order: random samples, a skipped or impossible comparison,
    stages the runtime did not run, the compiled model and the device."""
    run = report.run
    out = []
    if run is not None and run.random and report.numeric:
        out.append(VerdictLine(
            cause="not-seen", scope="", text=f"These numbers come from {run.random} random samples: they show where "
            "the stages part, not how accurate the model is on real inputs.",
            action="Give --data DIR (samples the first stage takes), or --config with its cal_data_dir."))
    one_stage = len(report.stages) == 1
    if run is not None and run.numeric_skipped:
        has_inputs = any(f.code.startswith("P") for f in report.findings)
        out.append(VerdictLine(cause="not-seen", scope="", text=sentence(f"The stages were not compared: "
                                                                          f"{run.numeric_skipped}"),
                               action="Fix the input findings, then run again." if has_inputs else
                               _ONE_STAGE_ACTION if one_stage else
                               "Fix the data this line names (or give --data DIR), then run again."))
    elif not report.numeric and not (run is not None and run.numeric_not_run):
        out.append(VerdictLine(
            cause="not-seen", scope="", text="No data were run: this report is about structure only."
            + toolchain_log_figures(report),
            action="Give --data DIR (samples the first stage takes), or --config with its cal_data_dir, to see where "
                   "the numbers part."))
    for reason in (run.numeric_not_run if run is not None else []):
        stage = reason.split(":")[0].strip()
        out.append(VerdictLine(
            cause="not-seen", scope=stage, text=f"graphaudit did not run {reason}.", stage=stage,
            action=_not_run_action(report, stage, reason)))
    last = report.stages[-1] if report.stages else None
    if last is not None and is_horizon(report, last.name):
        out.append(VerdictLine(
            cause="not-seen", scope="", text="The compiled model (.bin/.hbm) and the device are not measured here.",
            action=f"Run the same samples on the board and compare its outputs with the {last.name} stage's "
                   "(hb_verifier / hb_model_verifier checks onnx against the compiled model)."))
    return out


def _not_run_action(report: AuditReport, stage: str, reason: str) -> str:
    """What to do about a stage the numeric comparison did not run (``stage``: its name or file, as the reason
    begins). Horizon's runtime refusing the stage is not a reason to run under Horizon's runtime: for a stage
    without Horizon ops (an onnxruntime QDQ pipeline under --runtime horizon, whose opset-13 Add and DequantizeLinear
    the runtime's older onnxruntime fork has no kernel for) stock onnxruntime is the runtime to use."""
    if "Horizon's runtime cannot load" in reason or "Horizon's runtime failed" in reason:
        summary = next((s for s in report.stages if stage in (s.name, s.path)), None)
        if summary is not None and not is_horizon(report, summary.name):
            return ("This stage holds no Horizon op: measure it with stock onnxruntime (--runtime onnxruntime); "
                    "finding N403 gives Horizon's runtime's reason.")
        return "See finding N403."
    if "fixed" in reason.lower() or "horizon" in reason.lower():
        return ("Run graphaudit inside the toolchain's Python environment with --runtime horizon (README, \"Real "
                "Horizon toolchain output\"): Horizon's runtime runs the fixed-point stage.")
    return "See finding N403."
