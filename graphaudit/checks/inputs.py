"""Input checks (P2xx): the user's data against the input contract of the stage they are meant for.

They read ``AuditContext.input_stats`` (statistics of the data) and the contract of
``stages[data_stage]``; without data they yield nothing.
"""

from __future__ import annotations

from typing import Iterator

from ..findings import Finding
from ..toolchains.contracts import stage_contracts
from .base import AuditContext, check, make_finding

__all__: list[str] = []


def _pairs(ctx: AuditContext):
    if not ctx.input_stats or not ctx.stages:
        return
    stage = ctx.stages[ctx.data_stage]
    contracts = stage_contracts(stage)
    for name, st in ctx.input_stats.items():
        ic = contracts.get(name) or (next(iter(contracts.values())) if len(contracts) == 1 else None)
        if ic is not None:
            yield stage, ic, st


def _ch(values: list[float]) -> str:
    return ", ".join(f"{v:.3g}" for v in values)


@check("P201")
def check_layout(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P201 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.layout and st.layout and st.layout != ic.layout:
            yield make_finding(
                "P201", f"data for input {ic.name!r} look {st.layout} (shape {list(st.shape)}, channel dim of size "
                f"{st.shape[3 if st.layout == 'NHWC' else 1]}) but {stage.name} takes {ic.layout} "
                f"{list(ic.shape or ())}", stage=stage.name, location={"tensor": ic.name},
                evidence={"data_layout": st.layout, "data_shape": list(st.shape), "input_layout": ic.layout,
                          "input_shape": list(ic.shape or ())})


@check("P202")
def check_dtype(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P202 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        int_input = ic.dtype.startswith(("INT", "UINT"))
        int_data = st.dtype.startswith(("int", "uint"))
        if int_input and not int_data:
            yield make_finding("P202", f"{st.dtype} data for input {ic.name!r}, which takes {ic.dtype}: values in "
                               f"[{st.minimum:.3g}, {st.maximum:.3g}] would be truncated", stage=stage.name,
                               location={"tensor": ic.name}, evidence={"data_dtype": st.dtype, "input_dtype": ic.dtype})
        elif int_data and not int_input and not ic.normalizes and st.maximum > 1.0:
            yield make_finding("P202", f"{st.dtype} data in [{st.minimum:.3g}, {st.maximum:.3g}] for float input "
                               f"{ic.name!r}, which the model does not normalize: raw integers where normalized "
                               "floats are expected?", stage=stage.name, location={"tensor": ic.name},
                               evidence={"data_dtype": st.dtype, "input_dtype": ic.dtype})


def _looks_normalized(st) -> bool:
    """Mean/std-normalized images: small values around 0 with negatives (per-channel |mean| < 3, max |x| < 20)."""
    return st.minimum < 0 and max(abs(st.minimum), abs(st.maximum)) < 20 and all(abs(m) < 3 for m in st.channel_mean)


@check("P203")
def check_double_normalization(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P203 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if not ic.normalizes or not _looks_normalized(st):
            continue
        how = (f"subtracts mean [{_ch(ic.mean)}] and multiplies by [{_ch(ic.scale)}] (HzPreprocess)"
               if ic.domain == "x128" else "normalizes with " + "; ".join(ic.in_model))
        yield make_finding(
            "P203", f"data for input {ic.name!r} are already normalized (mean per channel {_ch(st.channel_mean)}, std "
            f"{_ch(st.channel_std)}, range [{st.minimum:.3g}, {st.maximum:.3g}]) while {stage.name} {how}: "
            "input normalized twice", stage=stage.name, location={"tensor": ic.name},
            evidence={"data_mean": st.channel_mean, "data_std": st.channel_std, "min": st.minimum, "max": st.maximum,
                      "model_preprocess": ic.in_model})


@check("P204")
def check_missing_normalization(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P204 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.normalizes or ic.domain != "float" or not ic.layout or ic.dtype != "FLOAT":
            continue
        if st.minimum >= 0 and st.maximum > 20:
            yield make_finding(
                "P204", f"data for float image input {ic.name!r} span [{st.minimum:.3g}, {st.maximum:.3g}] (mean per "
                f"channel {_ch(st.channel_mean)}) and {stage.name} does not normalize its input: raw pixels fed "
                "where normalized values are expected?", stage=stage.name, location={"tensor": ic.name},
                evidence={"data_mean": st.channel_mean, "min": st.minimum, "max": st.maximum})


@check("P205")
def check_offset(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P205 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.domain != "x128":
            continue
        if st.minimum >= 0 and st.maximum > 127.5:
            yield make_finding(
                "P205", f"data for input {ic.name!r} span [{st.minimum:.3g}, {st.maximum:.3g}] (mean {st.mean:.3g}) "
                f"but {stage.name} takes pixel - 128 in [-128, 127]: the -128 offset is missing", stage=stage.name,
                location={"tensor": ic.name}, evidence={"min": st.minimum, "max": st.maximum, "mean": st.mean,
                                                        "expected": [-128, 127]})
        elif st.maximum <= 0 and st.minimum < -128.5:
            yield make_finding(
                "P205", f"data for input {ic.name!r} span [{st.minimum:.3g}, {st.maximum:.3g}]: the -128 offset was "
                "applied twice", stage=stage.name, location={"tensor": ic.name},
                evidence={"min": st.minimum, "max": st.maximum, "expected": [-128, 127]})


@check("P206")
def check_unit_range(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P206 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.domain != "x128" or st.minimum < 0 or st.maximum > 1.0 or st.maximum <= 0:
            continue
        yield make_finding(
            "P206", f"data for input {ic.name!r} are in [0, 1] ([{st.minimum:.3g}, {st.maximum:.3g}], mean "
            f"{st.mean:.3g}) but {stage.name} takes pixel - 128 in [-128, 127] and divides by 255*std itself "
            f"(scale [{_ch(ic.scale)}]): the data were scaled by 1/255 in the harness", stage=stage.name,
            location={"tensor": ic.name}, evidence={"min": st.minimum, "max": st.maximum, "mean": st.mean,
                                                    "model_scale": ic.scale})


@check("P208")
def check_static_shape(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P208 (rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.shape is None:
            continue
        if len(ic.shape) != len(st.shape) or any(isinstance(d, int) and d > 0 and d != n
                                                 for d, n in zip(ic.shape, st.shape)):
            yield make_finding(
                "P208", f"data for input {ic.name!r} have shape {list(st.shape)} but {stage.name} takes "
                f"{list(ic.shape)}", stage=stage.name, location={"tensor": ic.name},
                evidence={"data_shape": list(st.shape), "input_shape": list(ic.shape)})
