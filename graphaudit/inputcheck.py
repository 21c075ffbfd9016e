"""Check the user's data against the input contract of the stage they are meant for (P2xx rules)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Iterator

import numpy as np

from .checks import RULES, run_checks
from .checks.base import AuditContext
from .errors import DataError, DataUnreadableError
from .findings import Finding
from .data.hbcal import open_stage_data
from .data.source import open_data
from .data.spec import InputSpec, input_specs
from .data.stats import InputStats, data_stats
from .stage import StageGraph
from .toolchains.contracts import convert_sample, pipeline_normalization, stage_contracts

__all__ = ["check_inputs", "input_data", "InputData", "form_effects", "fed_samples", "INPUT_CODES"]

#: Rule codes of the input-contract checks.
INPUT_CODES = tuple(code for code in RULES if code.startswith("P"))


def check_inputs(stages: list[StageGraph], data: str | os.PathLike, data_stage: int = 0,
                 raw_dtype: str | None = None, raw_shape: tuple | None = None,
                 max_samples: int | None = None, config=None) -> tuple[dict[str, InputStats], list[Finding]]:
    """Statistics of ``data`` and the P2xx findings against ``stages[data_stage]``'s input contract.

    ``config`` (a :class:`graphaudit.config.ConversionConfig`) declares layout and colour order where the
    stage does not say (:func:`graphaudit.toolchains.contracts.stage_contracts`).

    The data are read without checking their shape against the model (a wrong layout or shape is
    reported as a finding, P201/P208, not refused). Images are checked as the stage will be fed them:
    decoded to RGB pixels and converted to the stage's layout, colour order and value domain.

    Raises
    ------
    DataError
        Unreadable data (missing, pickled, truncated, empty directory...).
    """
    got = input_data(stages, data, data_stage, raw_dtype, raw_shape, max_samples, config)
    ctx = AuditContext(stages=stages, input_stats=got.stats, data_stage=data_stage, config=config,
                       data_from_pixel_files=got.from_pixel_files, data_unreadable=got.unreadable,
                       data_files_read=got.files_read, data_paired_inputs=got.paired_inputs)
    return got.stats, run_checks(ctx, INPUT_CODES)


def fed_samples(stages: list[StageGraph], data: str | os.PathLike, data_stage: int = 0, raw_dtype: str | None = None,
                raw_shape: tuple | None = None, config=None) -> Iterator[dict[str, np.ndarray]]:
    """The samples of ``data`` as ``stages[data_stage]`` is fed them (input name -> array, one sample at a time):
    arrays as they are, images and raw hb_mapper pixel folders converted to the stage's contract (layout, colour
    order, ``*_128`` offset) as :func:`graphaudit.numeric.compare.compare_stages` converts them.

    Raises
    ------
    DataError
        Unreadable data.
    """
    src = _open(stages, data, data_stage, raw_dtype, raw_shape, config)
    if src.domain == "pixels":  # images: check what the stage will be fed, as compare feeds it
        return _as_fed(src, stages, data_stage, config)
    return iter(src)


def _open(stages: list[StageGraph], data, data_stage: int, raw_dtype, raw_shape, config):
    specs = input_specs(stages[data_stage])
    try:  # with the model's shapes, stacks split into samples as they would for the comparison
        return open_stage_data(data, specs, raw_dtype=raw_dtype, raw_shape=raw_shape, config=config)
    except DataUnreadableError:  # no file holds a sample (an array without elements read as-is was one "sample")
        raise
    except DataError as first:  # data that do not fit: read them as they are, the rules say what is wrong
        try:
            return open_data(data, [InputSpec(s.name, s.dtype, None) for s in specs], raw_dtype=raw_dtype,
                             raw_shape=raw_shape)
        except DataError:
            raise first from None  # unreadable either way: the first reason knew the model's inputs


def _as_fed(src, stages: list[StageGraph], data_stage: int, config) -> Iterator[dict[str, np.ndarray]]:
    """Decoded images (RGB pixels, NHWC) converted to the data stage's input contract (layout, colour order,
    ``*_128`` offset, normalization), sample by sample, as :func:`graphaudit.numeric.compare.compare_stages`
    converts them.

    Raises
    ------
    DataError
        The pipeline does not tell how to normalize images (no HzPreprocess) for a float input.
    """
    contracts = [stage_contracts(s, config) for s in stages]
    norm = pipeline_normalization(contracts)
    home = contracts[data_stage]
    for sample in src:
        out = {}
        for name, x in sample.items():
            ic = home.get(name) or (next(iter(home.values())) if len(home) == 1 else None)
            if ic is None:
                raise DataError(f"{src.path}: the stage has no input {name!r}")
            try:
                out[name] = convert_sample(x, "pixels", ic, norm.get(ic.name))
            except ValueError as e:
                raise DataError(f"{src.path}: {e}") from e
        yield out


@dataclass
class InputData:
    """What the input step learned of the user's data.

    Attributes
    ----------
    stats : dict of str to InputStats
        Per-input statistics as the data stage is fed them (:func:`graphaudit.numeric.datastats.data_stats`).
    from_pixel_files : bool
        The data are hb_mapper raw pixel files (``cal_data_dir``), fed as ``x - 128``.
    unreadable : list of (pathlib.Path, str)
        Data files left out because they cannot be read, with the reason (rule P212;
        :attr:`graphaudit.data.source.DataSource.unreadable`).
    files_read : int
        Data files read (0 for random data).
    paired_inputs : list of str
        :attr:`graphaudit.data.source.DataSource.paired_inputs`: the inputs whose files pair up into one sample
        (every entry of ``unreadable`` is then one sample left out for all of them).
    """

    stats: dict[str, InputStats]
    from_pixel_files: bool
    unreadable: list = field(default_factory=list)
    files_read: int = 0
    paired_inputs: list = field(default_factory=list)


def input_data(stages: list[StageGraph], data: str | os.PathLike, data_stage: int = 0, raw_dtype: str | None = None,
               raw_shape: tuple | None = None, max_samples: int | None = None, config=None) -> InputData:
    """Statistics of ``data`` as ``stages[data_stage]`` is fed them, for the P2xx checks (which the caller runs).

    Raises
    ------
    DataUnreadableError
        No sample can be read (the file given, or every file of the directory, is truncated, corrupt, ...);
        files of a directory that cannot be read among others are left out (``unreadable``).
    DataError
        Unusable data (missing, empty directory, ...).
    """
    src = _open(stages, data, data_stage, raw_dtype, raw_shape, config)
    samples = _as_fed(src, stages, data_stage, config) if src.domain == "pixels" else iter(src)
    return InputData(data_stats(samples, max_samples=max_samples, label=data), src.kind == "raw", src.unreadable,
                     len(src.files), list(getattr(src, "paired_inputs", [])))


def _effect_line(eff: dict) -> str:
    if "error" in eff:
        return f" Its cost could not be measured: {eff['error']}."
    outs = "; ".join(f"{name}: cosine {o['cosine']:.4f}, SQNR {o['sqnr_db']:.1f} dB"
                     for name, o in list(eff["outputs"].items())[:4])
    fixed = f", {eff['corrected']} of them corrected" if eff.get("corrected", eff["samples"]) != eff["samples"] else ""
    return (f" Its cost on {eff['stage']} ({eff['samples']} sample(s){fixed}; the same data corrected as reference): "
            f"{outs}.")


def form_effects(findings: list[Finding], stages: list[StageGraph], data: str | os.PathLike, data_stage: int,
                 raw_dtype: str | None = None, raw_shape: tuple | None = None, runtime: str = "onnxruntime",
                 config=None) -> list[Finding]:
    """``findings`` with the cost of every recognised data mistake added: for each input finding that names a
    mistake with a correction (P203/P205/P206 from the value-domain rule), the data stage is run on the data as
    given and corrected (:func:`graphaudit.numeric.effect.correction_effect`) and the effect at the outputs is
    added to a copy of the finding (``evidence["effect"]`` and one sentence of the message). Other findings are
    returned as they are. A stage the runtime cannot run (the fixed-point stage in stock onnxruntime) is skipped.

    Raises
    ------
    DataError
        Unreadable data.
    """
    from .measure import unrunnable_stages
    from .numeric.effect import EFFECT_SAMPLES, correction_effect

    stage = stages[data_stage]
    if data_stage in {i for i, _ in unrunnable_stages(stages, runtime)}:
        return list(findings)
    contracts = stage_contracts(stage, config)
    out = []
    for f in findings:
        ic = contracts.get(f.location.get("tensor", ""))
        corr = _correction(f) if f.code in ("P203", "P205", "P206") and f.stage == stage.name and ic else None
        if corr is None:
            out.append(f)
            continue
        k, c = corr
        ev = f.evidence
        samples = fed_samples(stages, data, data_stage, raw_dtype, raw_shape, config)
        eff = correction_effect(stage, samples, ic.name, list(k), list(c), ic.channel_axis, runtime,
                                max_samples=EFFECT_SAMPLES if not ev.get("samples") else max(EFFECT_SAMPLES, 1 + max(
                                    ev["samples"][:EFFECT_SAMPLES])), only=ev.get("samples") or None)
        out.append(replace(f, evidence={**ev, "effect": eff}, message=f.message + _effect_line(eff)))
    return out


def _correction(f: Finding) -> tuple | None:
    """The per-channel ``(k, c)`` that turns the data of a value-domain finding into what the stage wants
    (``x' = k x + c``), or None when the finding names no form with a known inverse."""
    from .toolchains.valuedomain import FORMS, DomainVerdict, PixelDomain

    ev = f.evidence
    if not ev.get("form_a"):
        return None
    form = next((x for x in FORMS if x.key == ev["form"]), None)
    offset = float(ev.get("domain_offset", -128.0))
    dom = PixelDomain(offset, tuple(ev.get("model_mean") or [0.0]), tuple(ev.get("model_scale") or [1.0]), "")
    corr = DomainVerdict(form, a=ev["form_a"], b=ev["form_b"]).correction(dom)
    if corr is None or corr[0] is None:  # a form without a known inverse (standardized by other constants)
        return None
    k, c = corr
    if offset == 0.0:  # judged as hb_mapper calibration files (x); the stage is fed x - 128 and wants p - 128
        c = k * 128.0 + c - 128.0
    return k, c
