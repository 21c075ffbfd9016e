"""Input checks (P2xx): the user's data against the input contract of the stage they are meant for.

They read ``AuditContext.input_stats`` (statistics of the data) and the contract of
``stages[data_stage]``; without data they yield nothing.
"""

from __future__ import annotations

from typing import Iterator

from ..findings import Finding
from ..toolchains.contracts import pipeline_normalization, pixel_domain, stage_contracts
from ..toolchains.valuedomain import DomainVerdict, PixelDomain, judge_domain, judge_samples, undo_formula
from .base import AuditContext, make_finding

__all__: list[str] = []


def _pairs(ctx: AuditContext):
    if not ctx.input_stats or not ctx.stages:
        return
    stage = ctx.stages[ctx.data_stage]
    contracts = stage_contracts(stage, ctx.config)
    for name, st in ctx.input_stats.items():
        ic = contracts.get(name) or (next(iter(contracts.values())) if len(contracts) == 1 else None)
        if ic is not None:
            yield stage, ic, st


def _ch(values: list[float]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


def _domain_verdicts(ctx: AuditContext):
    """``(stage, contract, stats, domain, verdict)`` for every Horizon ``*_128`` input whose data the value-domain
    rule (:func:`graphaudit.toolchains.valuedomain.judge_domain`) finds wrong."""
    pairs = list(_pairs(ctx))
    if not pairs:
        return
    norm = pipeline_normalization([stage_contracts(s, ctx.config) for s in ctx.stages])
    for stage, ic, st in pairs:
        dom = pixel_domain(ic, norm.get(ic.name))
        if dom is None:
            continue
        lo, hi = st.channel_min or [st.minimum], st.channel_max or [st.maximum]
        shift = 0.0
        if ctx.data_from_pixel_files:  # hb_mapper calibration files hold x and are fed x - 128: judge x as pixels
            dom = PixelDomain(0.0, dom.mean, dom.scale, "pixels 0..255")
            shift = 128.0
        verdict = judge_domain([v + shift for v in lo], [v + shift for v in hi], dom, st.integral)
        if verdict is None and len(st.sample_ranges) > 1:  # a mix of right and wrong samples keeps a right union
            ranges = [([v + shift for v in a], [v + shift for v in b]) for a, b in st.sample_ranges]
            found = judge_samples(ranges, dom, st.integral)
            if found is not None:
                verdict, verdict.samples = found
        if verdict is not None:
            yield stage, ic, st, dom, verdict


def _ranges(lo: list[float], hi: list[float]) -> str:
    return ", ".join(f"[{a:.4g}, {b:.4g}]" for a, b in zip(lo, hi))


def _domain_finding(code: str, stage, ic, st, dom: PixelDomain, v: DomainVerdict) -> Finding:
    """One finding for data whose value range contradicts the input's pixel domain (the form in words, the
    per-channel evidence, what the data mean as pixels under the contract and under the recognised form)."""
    lo, hi = st.channel_min or [st.minimum], st.channel_max or [st.maximum]
    if dom.offset == 0.0:  # raw calibration files: the statistics are of x - 128 as fed; show the files' values
        lo, hi = [v + 128.0 for v in lo], [v + 128.0 for v in hi]
    norm = f"mean [{_ch(list(dom.mean))}] and scale [{_ch(list(dom.scale))}]"
    by = f" ({ic.in_model[0].split()[0]})" if ic.in_model else ""
    who = (f"{stage.name} takes {dom.label} and normalizes with {norm} itself{by}" if dom.offset else
           f"these hb_mapper calibration files must hold {dom.label}; {stage.name} subtracts 128 and normalizes "
           f"with {norm} itself{by}")
    took = (f"{who}. Per channel the data span "
            f"{_ranges(lo, hi)}: as {dom.label} that is pixels {_ranges(*zip(*v.contract_range))}")
    if v.form is None:
        msg = (f"data for input {ic.name!r} lie outside its value domain by {v.overflow:.4g} pixel levels and match "
               f"no known harness mistake: {took}.")
    else:
        also = f" (the same data as: {', '.join(v.also)})" if v.also else ""
        read = f", read as {v.form.key} pixels {_ranges(*zip(*v.implied))}" if v.a else ""
        msg = f"data for input {ic.name!r}: {v.form.describe(dom)}{also}. {took}{read}."
    if v.samples:
        shown = ", ".join(f"#{i}" for i in v.samples[:8]) + (", ..." if len(v.samples) > 8 else "")
        msg += (f" Judged sample by sample (numbered from 0 in reading order): {len(v.samples)} of {st.samples} "
                f"samples ({shown}); the others fit the input, so together they span its range (the pixel readings "
                f"above are of sample #{v.samples[0]}).")
    evidence = {**v.to_dict(), "data_channel_min": lo, "data_channel_max": hi, "data_mean": st.channel_mean,
                "data_std": st.channel_std, "min": st.minimum, "max": st.maximum, "model_mean": list(dom.mean),
                "model_scale": list(dom.scale), "domain": dom.label, "domain_offset": dom.offset,
                "samples": list(v.samples), "integral": st.integral}
    f = make_finding(code, msg, stage=stage.name, location={"tensor": ic.name, **({"node": ic.node} if ic.node
                                                                                 else {})}, evidence=evidence)
    if v.form is not None:
        f.fix = v.form.advice(dom) + undo_formula(v, dom)
    return f


def check_layout(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P201 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.layout and st.layout and st.layout != ic.layout:
            yield make_finding(
                "P201", f"data for input {ic.name!r} look {st.layout} (shape {list(st.shape)}, channel dim of size "
                f"{st.shape[3 if st.layout == 'NHWC' else 1]}) but {stage.name} takes {ic.layout} "
                f"{list(ic.shape or ())}", stage=stage.name, location={"tensor": ic.name},
                evidence={"data_layout": st.layout, "data_shape": list(st.shape), "input_layout": ic.layout,
                          "input_shape": list(ic.shape or ())}, fix=_layout_fix(st.layout, ic.layout))


def _layout_fix(have: str, want: str) -> str | None:
    """The transpose from the data's layout to the stage's (rank 4), or None for the rule's generic fix."""
    if len(have) != 4 or sorted(have) != sorted(want):
        return None
    perm = tuple(have.index(c) for c in want)
    return (f"Transpose the data from {have} to {want}: np.transpose(x, {perm}). input_layout_train declares the "
            "model's own layout and must not be changed to fit the data; the deployed model (quantized stage, .bin) "
            "takes input_layout_rt, which may be set to the layout the board-side data have.")


def check_dtype(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P202 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
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


def check_double_normalization(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P203 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st, dom, v in _domain_verdicts(ctx):
        if v.form is not None and v.form.code == "P203":
            yield _domain_finding("P203", stage, ic, st, dom, v)
    for stage, ic, st in _pairs(ctx):
        if ic.domain == "x128" or not ic.normalizes or not _looks_normalized(st):
            continue
        how = (f"subtracts mean [{_ch(ic.mean)}] and multiplies by [{_ch(ic.scale)}] (HzPreprocess)"
               if ic.domain == "x128" else "normalizes with " + "; ".join(ic.in_model))
        yield make_finding(
            "P203", f"data for input {ic.name!r} are already normalized (mean per channel {_ch(st.channel_mean)}, std "
            f"{_ch(st.channel_std)}, range [{st.minimum:.3g}, {st.maximum:.3g}]) while {stage.name} {how}: "
            "input normalized twice", stage=stage.name, location={"tensor": ic.name},
            evidence={"data_mean": st.channel_mean, "data_std": st.channel_std, "min": st.minimum, "max": st.maximum,
                      "model_preprocess": ic.in_model})


def check_missing_normalization(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P204 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.normalizes or ic.domain != "float" or not ic.layout or ic.dtype != "FLOAT":
            continue
        if st.minimum >= 0 and st.maximum > 20:
            yield make_finding(
                "P204", f"data for float image input {ic.name!r} span [{st.minimum:.3g}, {st.maximum:.3g}] (mean per "
                f"channel {_ch(st.channel_mean)}) and {stage.name} does not normalize its input: raw pixels fed "
                "where normalized values are expected?", stage=stage.name, location={"tensor": ic.name},
                evidence={"data_mean": st.channel_mean, "min": st.minimum, "max": st.maximum})


def check_offset(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P205 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st, dom, v in _domain_verdicts(ctx):
        if v.form is None or v.form.code == "P205":
            yield _domain_finding("P205", stage, ic, st, dom, v)


def check_unit_range(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P206 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st, dom, v in _domain_verdicts(ctx):
        if v.form is not None and v.form.code == "P206":
            yield _domain_finding("P206", stage, ic, st, dom, v)


def _fits(shape: tuple, model: tuple) -> bool:
    return len(shape) == len(model) and all(not (isinstance(d, int) and d > 0) or d == n for d, n in zip(model, shape))


def check_static_shape(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P208 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``. A shape that is only the other layout of a
    fitting one is P201's finding, not repeated here."""
    for stage, ic, st in _pairs(ctx):
        if ic.shape is None:
            continue
        bad = [sh for sh in (st.shapes or [st.shape]) if not _fits(sh, ic.shape)]
        if ic.layout and st.layout and st.layout != ic.layout:
            perm = (0, 2, 3, 1) if ic.layout == "NHWC" else (0, 3, 1, 2)
            bad = [sh for sh in bad if not (len(sh) == 4 and _fits(tuple(sh[k] for k in perm), ic.shape))]
        if bad:
            shown = ", ".join(str(list(sh)) for sh in bad[:3]) + (", ..." if len(bad) > 3 else "")
            yield make_finding(
                "P208", f"data for input {ic.name!r} have shape {shown} but {stage.name} takes {list(ic.shape)}",
                stage=stage.name, location={"tensor": ic.name},
                evidence={"data_shape": list(bad[0]), "data_shapes": [list(x) for x in bad], "input_shape":
                          list(ic.shape)})


#: Colour-order heuristic: natural-image channel means fall R > G > B (ImageNet mean 123.675, 116.28, 103.53,
#: torchvision docs); the spread between the first and last channel must exceed this share of 255 ...
CHANNEL_ORDER_MARGIN = 0.03
#: ... and hold in at least this share of the samples.
CHANNEL_ORDER_AGREEMENT = 0.6


def _order(means: list[float], margin: float) -> str:
    """``"RGB"`` when channel means fall like R > G > B by more than ``margin`` end to end, ``"BGR"`` when they
    rise, ``""`` otherwise."""
    if len(means) != 3:
        return ""
    if means[0] > means[1] > means[2] and means[0] - means[2] >= margin:
        return "RGB"
    if means[2] > means[1] > means[0] and means[2] - means[0] >= margin:
        return "BGR"
    return ""


def check_channel_order(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P207 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        if ic.color not in ("RGB", "BGR") or len(st.channel_mean) != 3 or _looks_normalized(st):
            continue
        margin = CHANNEL_ORDER_MARGIN * 255.0
        seen = _order(st.channel_mean, margin)
        if not seen or seen == ic.color:
            continue
        per = st.per_sample.channel_means
        agree = sum(1 for m in per if _order(m, 0.0) == seen)
        if not per or agree < CHANNEL_ORDER_AGREEMENT * len(per):
            continue
        trend = "falling" if seen == "RGB" else "rising"
        source = f" ({ic.color_source})" if ic.color_source else ""
        yield make_finding(
            "P207", f"data for input {ic.name!r} have channel means {_ch(st.channel_mean)}, {trend} from channel 0 to 2 "
            f"in {agree} of {len(per)} samples, like {seen}-ordered natural images (red brightest, blue darkest: "
            f"ImageNet R 123.7 > G 116.3 > B 103.5), but {stage.name} takes {ic.color}{source}: channels swapped?",
            stage=stage.name, location={"tensor": ic.name},
            evidence={"data_channel_mean": st.channel_mean, "data_order": seen, "stage_order": ic.color,
                      "samples_agreeing": agree, "samples": len(per)})


#: P209 thresholds: noise-like below this median lag-1 spatial correlation (photographs ~0.9, rendered text
#: >= 0.5, independent noise ~0) ...
NOISE_CORRELATION = 0.2
#: ... near-duplicates when at least this share of the searched samples repeats an earlier one.
DUPLICATE_SHARE = 0.25


def _left_out_words(left: list[str], used: int | None) -> str:
    """What the numeric comparison did with the samples holding NaN or infinite values (``left``: their labels;
    ``used``: the samples it compared, None when it did not run)."""
    if not left:
        return "a numeric comparison leaves out the samples holding them"
    shown = ", ".join(left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    if not used:
        return (f"the numeric comparison left out the {len(left)} sample(s) holding them ({shown}) and had no "
                "sample left, so it did not run")
    return (f"the numeric comparison left out the {len(left)} sample(s) holding them ({shown}) and compared the "
            f"stages on the other {used}")


def check_sample_quality(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P209 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx``."""
    for stage, ic, st in _pairs(ctx):
        ps = st.per_sample
        where = dict(stage=stage.name, location={"tensor": ic.name})
        if st.nonfinite:
            # an error: the samples holding them measure nothing (the numeric run leaves them out)
            left = [label for label, name in ctx.numeric_left_out if name == ic.name]
            yield make_finding("P209", f"{st.nonfinite} value(s) of the data for input {ic.name!r} are NaN or "
                               "infinite: the statistics and input checks use the finite values only; "
                               + _left_out_words(left, ctx.numeric_samples),
                               evidence={"nonfinite": st.nonfinite, "left_out_samples": left[:100],
                                         "left_out_count": len(left)},
                               severity="error", variant="nonfinite", **where)
        if ps.constant:
            shown = ", ".join(f"#{i} = {v:.4g}" for i, v in zip(ps.constant[:5], ps.constant_values[:5]))
            blank = len(ps.constant) == ps.samples  # nothing else was measured: every number is of blank inputs
            yield make_finding("P209", (("the only sample" if ps.samples == 1 else f"all {ps.samples} samples")
                                        if blank else f"{len(ps.constant)} of {ps.samples} samples")
                               + f" for input {ic.name!r} {'is' if blank and ps.samples == 1 else 'are'} constant "
                               f"({shown}{', ...' if len(ps.constant) > 5 else ''}): "
                               + ("the data carry no image content, so every figure measured on them is of blank "
                                  "inputs (the harness loads nothing, or zero-fills)" if blank else
                                  "they carry no image content"),
                               evidence={"constant_samples": ps.constant, "values": ps.constant_values,
                                         "samples": ps.samples},
                               severity="error" if blank else None, **where)
        if ps.searched >= 2 and len(ps.duplicates) >= max(1, DUPLICATE_SHARE * ps.searched):
            shown = ", ".join(f"#{j} ~ #{i}" for i, j in ps.duplicates[:5])
            yield make_finding("P209", f"{len(ps.duplicates)} of {ps.searched} samples for input {ic.name!r} are "
                               f"near-duplicates of an earlier sample ({shown}{', ...' if len(ps.duplicates) > 5 else ''}"
                               f"): the calibration set covers fewer distinct inputs than it seems",
                               evidence={"near_duplicates": [list(p) for p in ps.duplicates],
                                         "searched": ps.searched}, **where)
        rho = ps.median_correlation
        if rho is not None and rho < NOISE_CORRELATION:
            spread = ps.channel_mean_spread()
            rng = max(st.maximum - st.minimum, 1e-12)
            rel = ", ".join(f"{100 * s / rng:.2g}%" for s in spread)
            yield make_finding(
                "P209", f"samples for input {ic.name!r} look like noise: median lag-1 spatial correlation {rho:.3f} "
                f"over {len(ps.correlations)} samples (photographs and text are above 0.5, independent noise is 0)"
                + (f"; per-channel means vary across samples by only {rel} of the value range" if spread else ""),
                evidence={"median_spatial_correlation": rho, "correlations": ps.correlations[:100],
                          "channel_mean_spread": spread, "value_range": [st.minimum, st.maximum]}, **where)


def _unit_range(ic) -> tuple[list[float], list[float]] | None:
    """(mean, std) of an input's in-model normalization when it takes 0..255 pixels (an HzPreprocess, or a
    uint8 input) and the constants look like [0, 1]-domain values: every mean below 1 (not all zero), or every
    std below 1. A float input normalized by small constants may well take [0, 1] values: not judged."""
    if ic.domain != "x128" and ic.dtype != "UINT8":
        return None
    norm = ic.normalization()
    if norm is None:
        return None
    mean, std = norm
    if (all(abs(m) < 1.0 for m in mean) and any(m != 0 for m in mean)) or all(0 < s < 1.0 for s in std):
        return mean, std
    return None


def check_unit_range_preprocess(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P210 (graphaudit/rules/inputs.yaml): yields its findings over ``ctx`` (the stages' own preprocessing; no data)."""
    seen: set[str] = set()
    for stage in ctx.stages:
        for name, ic in stage_contracts(stage).items():
            bad = None if name in seen else _unit_range(ic)
            if bad is None:
                continue
            seen.add(name)
            mean, std = bad
            how = (f"the HzPreprocess of input {name!r} subtracts mean [{_ch(mean)}] and multiplies by "
                   f"[{_ch(ic.scale)}] (std [{_ch(std)}])" if ic.domain == "x128" else
                   f"the uint8 input {name!r} is normalized in the model with mean [{_ch(mean)}] and std [{_ch(std)}] "
                   f"({'; '.join(ic.in_model)})")
            yield make_finding(
                "P210", f"{stage.name}: {how} on 0..255 pixels: these are values of a [0, 1] pipeline; use mean "
                f"{_ch([255 * m for m in mean])} and scale {_ch([1 / (255 * s) if s else float('inf') for s in std])} "
                "(255*mean, 1/(255*std))",
                stage=stage.name, location={"tensor": name, **({"node": ic.node} if ic.node else {})},
                evidence={"mean": mean, "std": std, "suggested_mean": [255 * m for m in mean],
                          "suggested_scale": [1 / (255 * s) if s else None for s in std]})


#: Integer range of a quantized dtype, as onnx.TensorProto names it (ONNX QuantizeLinear: saturate to it).
_QRANGE = {"UINT8": (0, 255), "INT8": (-128, 127), "UINT16": (0, 65535), "INT16": (-32768, 32767)}

#: How far the data may reach beyond the calibrated input range, as a share of its width: beyond
#: :data:`OUTSIDE_WARNING` a warning, beyond :data:`OUTSIDE_ERROR` an error (half the range again clips a large part
#: of the data: values normalized twice with mean 0.5 / std 0.5 reach 1.0 beyond [-1, 1]).
OUTSIDE_WARNING = 0.1
OUTSIDE_ERROR = 0.5


def input_quantizer_ranges(stage) -> dict[str, tuple[float, float, str]]:
    """Graph input -> ``(low, high, node name)``: the real-valued range the stage's quantizer of that input
    represents, from a per-tensor ``QuantizeLinear`` reading the input directly (ONNX QuantizeLinear:
    ``y = saturate(round(x / scale) + zero_point)``, so ``x`` in ``[(qmin - zp) scale, (qmax - zp) scale]`` is kept and
    the rest clips), or an ``HzCalibration`` with one threshold ``t`` on it (int8: ``[-128 t/127, t]``,
    docs/HORIZON.md section 3). Inputs without such a quantizer are left out."""
    import numpy as np

    out: dict[str, tuple[float, float, str]] = {}
    for n in stage.top_nodes():
        x = n.inputs[0] if n.inputs else ""
        if x not in stage.inputs or x in out:
            continue
        if n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") and len(n.inputs) >= 2:
            s = stage.tensors[n.inputs[1]].value() if n.inputs[1] in stage.tensors else None
            zt = stage.tensors.get(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
            z = zt.value() if zt is not None else np.zeros(1, np.uint8)
            dtype = zt.dtype if zt is not None else "UINT8"
            if s is None or z is None or s.size != 1 or z.size != 1 or dtype not in _QRANGE:
                continue
            qmin, qmax = _QRANGE[dtype]
            scale, zp = float(s.ravel()[0]), float(z.ravel()[0])
            out[x] = ((qmin - zp) * scale, (qmax - zp) * scale, n.name or n.id)
        elif n.op_type == "HzCalibration":
            t = n.attributes.get("thresholds")
            if isinstance(t, list) and len(t) == 1 and float(t[0]) > 0:
                out[x] = (-128 * float(t[0]) / 127, float(t[0]), n.name or n.id)
    return out


def check_calibrated_range(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P211 (graphaudit/rules/inputs.yaml): the data reach far outside the input range a quantized stage was
    calibrated for (its input quantizer clips them)."""
    if not ctx.input_stats:
        return
    fed = ctx.stages[ctx.data_stage]
    for st in ctx.stages[ctx.data_stage + 1:]:
        for x, (lo, hi, node) in input_quantizer_ranges(st).items():
            stats = ctx.input_stats.get(x)
            if stats is None or x not in fed.inputs or hi <= lo or not stats.samples:
                continue
            beyond = max(lo - stats.minimum, stats.maximum - hi, 0.0) / (hi - lo)
            if beyond <= OUTSIDE_WARNING:
                continue
            yield make_finding(
                "P211", f"data for input {x!r} span [{stats.minimum:.4g}, {stats.maximum:.4g}] (mean per channel "
                f"{_ch(stats.channel_mean)}) while {st.name} was calibrated for [{lo:.4g}, {hi:.4g}] at {node!r}: "
                f"{beyond:.0%} of that range beyond it, clipped by the quantizer; the data are not prepared as "
                "the calibration data were (normalized twice, another scale or offset?)", stage=st.name,
                location={"tensor": x, "node": node}, severity="error" if beyond > OUTSIDE_ERROR else "warning",
                evidence={"min": stats.minimum, "max": stats.maximum, "calibrated": [lo, hi], "beyond": beyond,
                          "data_stage": fed.name})


def check_unreadable_files(ctx: AuditContext) -> Iterator[Finding]:
    """Rule P212 (graphaudit/rules/inputs.yaml): one finding for the data files left out because they cannot be
    read (``ctx.data_unreadable``: ``(path, reason)``, the reason naming the file; ``ctx.data_files_read``: the
    files read instead, 0 when none could be). It counts files, or samples where the files of several inputs pair
    up into one sample (``ctx.data_paired_inputs``: a calibration directory of several inputs, where one bad file
    leaves out the sample of every input)."""
    bad = ctx.data_unreadable
    if not bad:
        return
    n, read = len(bad), ctx.data_files_read
    shown = "; ".join(why for _p, why in bad[:3]) + (f"; and {n - 3} more" if n > 3 else "")
    paired = ctx.data_paired_inputs
    if paired:  # calibration_data/<input>/N.npy: each entry is one sample, left out for every input
        kept = read // len(paired)
        names = ", ".join(repr(x) for x in paired)
        went_on = (f"the input checks and the numeric comparison use the other {kept} sample(s)" if kept else
                   "no sample could be read, so the input checks and the numeric comparison did not run")
        head = (f"{n} of {n + kept} sample(s) were left out for every input ({names}: a sample is one file per "
                f"input) because a file of theirs could not be read or fed ({went_on})")
    else:
        went_on = (f"the input checks and the numeric comparison use the other {read} file(s)" if read else
                   "no file could be read, so the input checks and the numeric comparison did not run")
        head = f"{n} of {n + read} data file(s) could not be read or fed and were left out ({went_on})"
    yield make_finding(
        "P212", f"{head}: {shown}",
        location={"file": str(bad[0][0])},
        evidence={"unreadable": [{"file": str(p), "reason": why} for p, why in bad[:100]], "count": n,
                  "files_read": read, "counts": "samples" if paired else "files", "paired_inputs": list(paired)})
