"""graphaudit's config lint against hb_mapper's own config validation (OE 1.x), differentially.

hb_mapper 1.x validates its YAML in ``horizon_tc_ui/config/mapper_conf_parser.py``: ``MpConf(yaml, model_type="onnx")``
loads it with ``yaml.safe_load``, validates it against a ``schema.Schema`` (an unknown key is refused) and runs one
``_validate_*`` method per key (input names against the ONNX model it names, shapes, type/layout pairs, norm_type
with mean/scale counts, cal_data_dir with calibration_type, ...) without converting anything. Its only side effect
is creating ``working_dir``; every config here lives in a temporary directory beside a symlink of the model it names
(the real sets' models; a stand-in ONNX model with the config's inputs for the public corpus configs) and empty
calibration directories of the names it gives.

The configs: the real sets' ``samples/build/hb/*/config.yaml`` and, with ``$GRAPHAUDIT_CORPUS``, the public 1.x
corpus configs (ONNX ones), each with deterministic variants (keys removed, renamed, moved to another section,
values of the wrong type or out of range, per-input counts wrong, bad type/layout pairs). For each:

- every config MpConf refuses gets an error from :func:`graphaudit.lint_config` on a key the refusing check reads;
- a config MpConf accepts gets no error, except the semantic errors graphaudit documents as its own
  (:data:`OWN_ERRORS`, listed in the README's "Config lint" section with why hb_mapper lets them through).

Runs only in the toolchain's Python 3.10 venv (``tests/test_toolchain_env.py`` starts this folder there); the
agreement table is printed in the terminal summary.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import traceback
from pathlib import Path

import pytest

pytest.importorskip("horizon_tc_ui.config.mapper_conf_parser",
                    reason="hb_mapper's config parser imports only in the toolchain's Python 3.10 venv "
                           "(samples/hbenv.sh); tests/test_toolchain_env.py runs this suite there")

import yaml  # noqa: E402  (PyYAML: what hb_mapper reads with)

from graphaudit.config import load_config  # noqa: E402
from graphaudit.lint import lint_config  # noqa: E402
from graphaudit.load import load_stage  # noqa: E402

from ..horizon_check import built_sets  # noqa: E402
from .conftest import LINT_LINES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: Errors graphaudit raises on configs hb_mapper's validation accepts, each with why hb_mapper lets it through
#: (the README's "Config lint" section lists them). code -> reason.
OWN_ERRORS = {
    "C309": "norm_type not selecting the mean_value/scale_value given (or missing): hb_mapper accepts it and "
            "silently applies no_preprocess or ignores the values",
    "C306": "a mean/scale count other than 1 or C: hb_mapper parses the numbers without counting them",
    "C303": "an unused mean/scale that is not a number, a scale of 0, a non-numeric key hb_mapper only reads "
            "later: hb_mapper parses mean/scale only for the norm_type that uses them, and never checks a "
            "scale of 0",
    "C312": "mean/scale given for a featuremap input with norm_type no_preprocess: hb_mapper ignores them",
    "C316": "max_percentile 0: hb_mapper tests `if max_percentile:` and so never range-checks 0",
    "C311": "an image input_shape that is not 4-D (1x3x224 for rgb NCHW): hb_mapper only logs 'make sure it is a "
            "featuremap input', but it inserts HzPreprocess for rank-4 inputs only, so the normalization is lost",
}

#: Which YAML keys each of MpConf's checks reads (a refusal names these keys).
CHECK_KEYS = {
    "_validate_model_file": {"onnx_model", "caffe_model", "prototxt", "model_parameters"},
    "_validate_march": {"march"},
    "_validate_working_dir": {"working_dir"},
    "_validate_output_model_file_prefix": {"output_model_file_prefix"},
    "_validate_model_debug_mode": {"debug_mode"},
    "_validate_node_info": {"node_info", "set_node_data_type"},
    "_validate_input_name": {"input_name"},
    "_validate_input_shape": {"input_shape"},
    "_validate_fast_perf": {"optimization", "input_name", "input_shape"},
    "_validate_input_batch": {"input_batch", "input_shape"},
    "_validate_input_type_and_layout": {"input_type_rt", "input_layout_rt", "input_type_train", "input_layout_train",
                                        "input_space_and_range", "input_shape"},
    "_validate_norm_type": {"norm_type", "mean_value", "scale_value", "input_type_rt"},
    "_validate_odd_shape": {"input_shape", "input_type_rt", "input_layout_train"},
    "_validate_calibration_type": {"calibration_type"},
    "_validate_cal_data_dir": {"cal_data_dir", "calibration_type"},
    "_validate_cal_data_type": {"cal_data_type"},
    "_validate_cal_data_dir_and_cal_data_type": {"cal_data_dir", "cal_data_type"},
    "_validate_max_percentile": {"max_percentile"},
    "_validate_custom_op": {"custom_op", "custom_op_method", "op_register_files", "custom_op_dir"},
    "_validate_optimize_level": {"optimize_level"},
    "_validate_input_source": {"input_source", "input_type_rt", "input_name"},
    "_validate_core_num": {"core_num"},
    "_validate_compile_mode": {"compile_mode"},
    "_validate_balance_factor": {"balance_factor", "compile_mode"},
    "_validate_max_time_per_fc": {"max_time_per_fc"},
    "_validate_advice": {"advice"},
}

#: Configs checked: every base config, and an evenly strided, deterministic share of all variants (about 0.07 s each
#: on the 2-core development machine, both sides together); ``GRAPHAUDIT_LINT_DIFF_ALL=1`` checks every variant.
TARGET_CONFIGS = 700

SECTIONS = ("model_parameters", "input_parameters", "calibration_parameters", "compiler_parameters")


# ----------------------------------------------------------------------------------------------------------------
# The oracle


def mpconf(path: Path) -> tuple[bool, set[str], str]:
    """(accepted, keys the refusing check reads, one-line reason) of hb_mapper's own validation of ``path``."""
    from horizon_tc_ui.config.mapper_conf_parser import MpConf
    from schema import SchemaError

    logging.disable(logging.CRITICAL)  # MpConf logs every default it fills in
    cwd = os.getcwd()
    try:
        MpConf(str(path), model_type="onnx")
        return True, set(), ""
    except SchemaError as e:
        text = str(e.code if e.code else e)
        keys = {k for k in _quoted(text)}
        return False, keys | {"<schema>"}, f"schema: {text.splitlines()[0][:160]}"
    except Exception as e:  # noqa: BLE001 - every refusal of hb_mapper, as hb_mapper raises it
        frames = [f.name for f in traceback.extract_tb(e.__traceback__) if f.name.startswith("_validate_")
                  and f.name != "_validate_parameters"]
        check = frames[-1] if frames else "?"
        return False, set(CHECK_KEYS.get(check, set())), f"{check}: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    finally:
        os.chdir(cwd)
        logging.disable(logging.NOTSET)


def _quoted(text: str) -> set[str]:
    import re

    return set(re.findall(r"'([A-Za-z_][A-Za-z0-9_]*)'", text))


# ----------------------------------------------------------------------------------------------------------------
# The configs and their variants


def _standin_model(path: Path, data: dict) -> None:
    """A tiny ONNX model (Identity per input) with the inputs a corpus config names, at their input_shape."""
    import onnx
    from onnx import TensorProto, helper

    ip = data.get("input_parameters") or {}
    names = [n.strip() for n in str(ip.get("input_name") or "input").split(";") if n.strip()]
    shapes = [s.strip() for s in str(ip.get("input_shape") or "").split(";") if s.strip()]
    types = [t.strip() for t in str(ip.get("input_type_train") or "rgb").split(";")]
    layouts = [t.strip().upper() for t in str(ip.get("input_layout_train") or "NCHW").split(";")]
    ins, outs, nodes = [], [], []
    for i, name in enumerate(names):
        try:
            dims = [int(d) for d in shapes[i].lower().split("x")]
        except (IndexError, ValueError):
            c = 1 if (types[i] if i < len(types) else types[0]) == "gray" else 3
            dims = [1, c, 224, 224] if (layouts[i] if i < len(layouts) else layouts[0]) == "NCHW" else [1, 224, 224, c]
        ins.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, dims))
        outs.append(helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, dims))
        nodes.append(helper.make_node("Identity", [name], [f"out{i}"], name=f"id{i}"))
    g = helper.make_graph(nodes, "standin", ins, outs)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), str(path))


def bases() -> list[tuple[str, dict, Path]]:
    """(label, YAML data, model file) of every base config: the real sets', then the corpus' 1.x ONNX configs."""
    out = []
    for d in built_sets():
        data = yaml.safe_load((d / "config.yaml").read_text())
        out.append((d.name, data, d / data["model_parameters"]["onnx_model"]))
    corpus = os.environ.get("GRAPHAUDIT_CORPUS")
    cdir = Path(corpus) / "horizon" / "configs" if corpus else None
    if cdir is not None and cdir.is_dir():
        for p in sorted(cdir.glob("*.yaml")):
            try:
                cfg = load_config(p)
                data = yaml.safe_load(p.read_text())
            except Exception:  # noqa: BLE001 - a corpus file graphaudit or PyYAML cannot read is not a base
                continue
            mp = data.get("model_parameters") if isinstance(data, dict) else None
            if cfg.family != "1.x" or not isinstance(mp, dict) or not mp.get("onnx_model"):
                continue
            out.append((p.stem.split("__")[-1][:40], _confined(data), None))
    return out


def _confined(data: dict) -> dict:
    """The config with every path it names made relative (its base name), so that the model, the calibration
    directories and the working_dir hb_mapper creates all stay inside the test's temporary directory."""
    data = copy.deepcopy(data)
    for sec, key in (("model_parameters", "onnx_model"), ("model_parameters", "working_dir"),
                     ("calibration_parameters", "cal_data_dir"), ("custom_op", "custom_op_dir")):
        s = data.get(sec)
        if isinstance(s, dict) and isinstance(s.get(key), str):
            s[key] = ";".join(Path(x.strip()).name or "d" if Path(x.strip()).is_absolute() or ".." in x
                              else x.strip() for x in s[key].split(";"))
    return data


def _inputs(data: dict) -> list[str]:
    return [n.strip() for n in str((data.get("input_parameters") or {}).get("input_name") or "").split(";")
            if n.strip()]


def variants(data: dict) -> list[tuple[str, str, dict]]:
    """(kind, target key, mutated data) of a base config, deterministic."""
    out: list[tuple[str, str, dict]] = [("base", "-", copy.deepcopy(data))]

    def put(kind, key, fn):
        d = copy.deepcopy(data)
        fn(d)
        out.append((kind, key, d))

    present = [(s, k) for s in SECTIONS for k in (data.get(s) or {})]
    for sec, key in present:
        put("key removed", key, lambda d, s=sec, k=key: d[s].pop(k))
        put("key renamed", key, lambda d, s=sec, k=key: d[s].__setitem__(k[:-1] + k[-1] * 2, d[s].pop(k)))
        other = SECTIONS[(SECTIONS.index(sec) + 1) % 4]
        put("key moved", key, lambda d, s=sec, k=key, o=other: (d.setdefault(o, {}) if d.get(o) is not None
                                                                else d.__setitem__(o, {}),
                                                                d[o].__setitem__(k, d[s].pop(k))))
        v = data[sec][key]
        put("wrong type", key, lambda d, s=sec, k=key, v=v: d[s].__setitem__(k, [v]))
        put("wrong type", key, lambda d, s=sec, k=key: d[s].__setitem__(k, {"a": 1}))
        put("wrong type", key, lambda d, s=sec, k=key, v=v: d[s].__setitem__(k, 7 if not isinstance(v, int)
                                                                            else "seven"))
        put("wrong type", key, lambda d, s=sec, k=key: d[s].__setitem__(k, True))
    for sec in SECTIONS:
        put("section removed", sec, lambda d, s=sec: d.pop(s, None))
        put("section empty", sec, lambda d, s=sec: d.__setitem__(s, None))
    put("key unknown", "frobnicate", lambda d: d["model_parameters"].__setitem__("frobnicate", "x"))
    put("section unknown", "extra_parameters", lambda d: d.__setitem__("extra_parameters", {"a": 1}))

    def setv(sec, key, value, kind="out of range"):
        put(kind, key, lambda d: (d.__setitem__(sec, {}) if not isinstance(d.get(sec), dict) else None,
                                  d[sec].__setitem__(key, value)))

    mp, ip, cp, cc = SECTIONS
    for v in ("bayes_e", "BAYES-E", "Bayes", "nash-e", "x3", "bernoulli"):
        setv(mp, "march", v)
    for v in ("dump", "dump_calibration_data", "dump_calibration_data;x"):
        setv(mp, "debug_mode", v)
    setv(mp, "layer_out_dump", "yes")
    setv(mp, "log_level", "debug")
    setv(mp, "set_node_data_type", "Conv_0:int16")
    setv(mp, "node_info", "Conv_0:int16")
    setv(mp, "node_info", "Conv_0:int16;Conv_1:int16")
    setv(mp, "node_info", "Conv_0:int32")
    setv(mp, "node_info", {"Conv_0": {"ON": "BPU", "OutputType": "int16"}})
    setv(mp, "node_info", {"Conv_0": {"ON": "bpu"}})
    setv(mp, "node_info", {"Conv_0": {"ON": "BPU", "OutputType": "float"}})
    setv(mp, "node_info", {"Conv_0": {"Run": "BPU"}})
    setv(mp, "node_info", {"Conv_0": "int16"})
    setv(mp, "onnx_model", "model.pb")
    n = max(1, len(_inputs(data)))
    ipd = data.get(ip) or {}
    for key in ("input_type_rt", "input_type_train", "input_layout_train", "input_layout_rt", "norm_type",
                "input_space_and_range", "input_shape", "mean_value", "scale_value", "input_name"):
        if key in ipd:
            setv(ip, key, ";".join([str(ipd[key])] * (n + 1)), "per-input count")
    for key in ("cal_data_dir", "cal_data_type"):
        if key in (data.get(cp) or {}):
            setv(cp, key, ";".join([str(data[cp][key])] * (n + 1)), "per-input count")
    if n == 1:
        setv(ip, "input_name", "no_such_input", "per-input count")
    for v in ("NV12", "nv12", "yuv444", "yuv444_128", "yuv420sp_bt601_video", "rgbp", "gray", "featuremap", "bgr",
              "rgb", "yuv_bt601_full"):
        setv(ip, "input_type_rt", v, "type/layout pair")
    for v in ("rgb", "bgr", "gray", "yuv444", "featuremap", "yuv444_128", "RGB", "nv12"):
        setv(ip, "input_type_train", v, "type/layout pair")
    for v in ("nchw", "NCWH", "NHWC", "NCHW"):
        setv(ip, "input_layout_train", v, "type/layout pair")
        setv(ip, "input_layout_rt", v, "type/layout pair")
    setv(ip, "input_space_and_range", "bt601_video", "type/layout pair")
    setv(ip, "input_space_and_range", "full", "type/layout pair")
    for v in ("1x3x224", "1x3x225x225", "1x224x224x3", "1x3x224x224", "1x1x224x224", "1,3,224,224", "ax3x224x224"):
        setv(ip, "input_shape", v, "type/layout pair")
    for v in ("0", "2", "200", "5000", "abc", "1;2"):
        setv(ip, "input_batch", v)
    for nt, mean, scale in (("data_mean_and_scale", None, "0.0078125"), ("data_mean", None, None),
                            ("data_scale", "128", None), ("data_mean_scale", "128", "0.0078125"),
                            ("mean_file", "128", None), ("data_mean", "12a", None), ("data_scale", None, "x"),
                            ("no_preprocess", "128", "0.0078125"), ("data_scale", None, "0.0078125"),
                            ("data_mean_and_scale", "128,128,128", "0.0078125")):
        def norm(d, nt=nt, mean=mean, scale=scale):
            d[ip]["norm_type"] = nt
            for k, val in (("mean_value", mean), ("scale_value", scale)):
                if val is None:
                    d[ip].pop(k, None)
                else:
                    d[ip][k] = val
        put("norm_type", "norm_type", norm)
    for v in ("percentile", "KL", "kl", "load", "skip", "mix", ""):
        setv(cp, "calibration_type", v)
    for v in (1.5, 0, -0.1, 0.99999, "high", True):
        setv(cp, "max_percentile", v)
    for v in ("int8", "float16", "FLOAT32", "uint8"):
        setv(cp, "cal_data_type", v)
    for v in ("set_model_output_int8", "set_model_output_int16", "run_fast", "set_everything"):
        setv(cp, "optimization", v)
    for v in ("yes", 1):
        setv(cp, "per_channel", v)
        setv(cp, "preprocess_on", v)
    setv(cp, "enable_int16", True)
    setv(cp, "cal_data_dir", "")
    for v in ("O4", "o2", "O3", 2):
        setv(cc, "optimize_level", v)
    for v in ("fast", "Latency", "bandwidth"):
        setv(cc, "compile_mode", v)
    for mode, bf in (("balance", None), ("balance", 101), ("balance", -1), ("balance", 50), ("latency", 500),
                     ("latency", 2)):
        def bal(d, mode=mode, bf=bf):
            if not isinstance(d.get(cc), dict):
                d[cc] = {}
            d[cc]["compile_mode"] = mode
            d[cc].pop("balance_factor", None)
            if bf is not None:
                d[cc]["balance_factor"] = bf
        put("out of range", "balance_factor", bal)
    for v in (0, 3, 2, "2"):
        setv(cc, "core_num", v)
    for v in (500, 1000, 0, 5_000_000_000):
        setv(cc, "max_time_per_fc", v)
    for v in (-1, 0, 3, 1.5):
        setv(cc, "advice", v)
    setv(cc, "jobs", "many")
    setv(cc, "debug", "yes")
    setv(cc, "ability_entry", "x")
    setv(cc, "cache_mode", "enable")
    names = _inputs(data) or ["input"]
    for src in ("ddr", "pyramid", "resizer", "dram"):
        setv(cc, "input_source", {names[0]: src}, "input_source")
    setv(cc, "input_source", "ddr", "input_source")
    setv(cc, "input_source", {"not_an_input": "ddr"}, "input_source")
    return out


def _materialise(tmp: Path, data: dict, model: Path | None, base_data: dict) -> Path:
    """Write ``data`` as config.yaml in ``tmp`` beside its model and empty calibration directories."""
    tmp.mkdir(parents=True)
    mp = base_data.get("model_parameters") or {}
    target = tmp / str(mp.get("onnx_model"))
    assert target.resolve().is_relative_to(tmp.resolve()), target  # nothing is written outside tmp
    target.parent.mkdir(parents=True, exist_ok=True)
    if model is not None:
        target.symlink_to(model.resolve())
    else:
        _standin_model(target, base_data)
    for key in ("cal_data_dir",):
        for sec in (base_data.get("calibration_parameters") or {},):
            for d in str(sec.get(key) or "").split(";"):
                if d.strip() and (tmp / d.strip()).resolve().is_relative_to(tmp.resolve()):
                    (tmp / d.strip()).mkdir(parents=True, exist_ok=True)
    p = tmp / "config.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def _graphaudit(path: Path, stage) -> tuple[list, str]:
    """(errors, crash) of graphaudit's lint; each error as (code, key path)."""
    from graphaudit.errors import GraphAuditError

    try:
        # hb_mapper reads every config as a 1.x one: so does graphaudit here (a march of nash-* would otherwise
        # make it read the config as hb_compile's, rightly, but then there is nothing to compare)
        fs = lint_config(path, stages=[stage] if stage is not None else None, toolchain="1.x")
    except GraphAuditError as e:
        return [("refused", str(e))], ""
    except Exception:  # noqa: BLE001 - a traceback is a failure of its own
        return [], traceback.format_exc(limit=3)
    return [(f.code, str(f.location.get("key", ""))) for f in fs if f.severity == "error"], ""


def _on_key(errors: list, keys: set[str]) -> bool:
    for code, key in errors:
        if code == "refused":
            return True  # graphaudit refuses the file outright (exit 2): not a silent pass
        parts = set(key.split("."))
        if parts & keys or ("<schema>" in keys and code in ("C301", "C303")):
            return True
    return False


# ----------------------------------------------------------------------------------------------------------------


def test_graphaudit_agrees_with_hb_mapper(tmp_path):
    all_bases = bases()
    assert len(all_bases) >= 11, f"{len(all_bases)} base configs: the real sets are missing (run ./setup.sh)"
    rows: dict[str, list[int]] = {}
    refused_missed, accepted_flagged, crashes = [], [], []
    totals = {"refused": 0, "refused_same_key": 0, "refused_other_key": 0, "accepted": 0, "accepted_clean": 0,
              "accepted_own": 0}
    n = 0
    every = [(b, v) for b in all_bases for v in variants(b[1])]
    stride = 1 if os.environ.get("GRAPHAUDIT_LINT_DIFF_ALL") else max(1, len(every) // TARGET_CONFIGS)
    stages: dict = {}
    for i, ((label, data, model), (kind, key, vdata)) in enumerate(every):
        if kind != "base" and i % stride:
            continue
        if model is not None and model not in stages:
            stages[model] = load_stage(model, role="source", name="source")
        stage = stages.get(model)
        if True:
            n += 1
            p = _materialise(tmp_path / f"v{n:05d}", vdata, model, data)
            ok, keys, why = mpconf(p)
            errors, crash = _graphaudit(p, stage)
            if crash:
                crashes.append(f"{label} {kind} {key}: {crash}")
                continue
            row = rows.setdefault(kind, [0, 0, 0, 0, 0])
            if not ok:
                totals["refused"] += 1
                row[0] += 1
                if _on_key(errors, keys | {key}):
                    totals["refused_same_key"] += 1
                    row[1] += 1
                else:
                    if errors:
                        totals["refused_other_key"] += 1
                    refused_missed.append(f"{label} [{kind} {key}] hb_mapper: {why}; graphaudit errors: {errors}")
            else:
                totals["accepted"] += 1
                row[2] += 1
                foreign = [e for e in errors if e[0] not in OWN_ERRORS]
                if not errors:
                    totals["accepted_clean"] += 1
                    row[3] += 1
                elif not foreign:
                    totals["accepted_own"] += 1
                    row[4] += 1
                else:
                    accepted_flagged.append(f"{label} [{kind} {key}] hb_mapper accepts; graphaudit: {foreign}")
    LINT_LINES.append(f"{n} configs of {len(every)} generated (every {stride}th variant, every base; "
                      f"{len(all_bases)} bases: {sum(1 for b in all_bases if b[2] is not None)} real "
                      f"sets, {sum(1 for b in all_bases if b[2] is None)} corpus configs with a stand-in model)")
    LINT_LINES.append(f"{'variant kind':<20} {'refused':>8} {'error on key':>13} {'accepted':>9} {'no error':>9} "
                      f"{'own errors':>11}")
    for kind, r in rows.items():
        LINT_LINES.append(f"{kind:<20} {r[0]:>8} {r[1]:>13} {r[2]:>9} {r[3]:>9} {r[4]:>11}")
    LINT_LINES.append(f"{'total':<20} {totals['refused']:>8} {totals['refused_same_key']:>13} "
                      f"{totals['accepted']:>9} {totals['accepted_clean']:>9} {totals['accepted_own']:>11}")
    LINT_LINES.append(f"disagreements: {len(refused_missed)} refused without an error on the key, "
                      f"{len(accepted_flagged)} accepted with an error graphaudit does not document as its own; "
                      f"{len(crashes)} graphaudit tracebacks")
    LINT_LINES.extend("  " + line[:300] for line in (refused_missed + accepted_flagged + crashes)[:80])
    assert n >= 300, f"only {n} configs"
    assert not crashes, "\n".join(crashes[:5])
    assert not refused_missed, "\n".join(refused_missed[:40])
    assert not accepted_flagged, "\n".join(accepted_flagged[:40])


if __name__ == "__main__":  # development: python -m tests.horizon_runtime.test_lint_vs_hb_mapper
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
