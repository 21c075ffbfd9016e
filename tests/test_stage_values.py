"""One sample's stage values are freed as the reduction is done with them: when stages run one after the other
(fewer cores than stages, or Horizon's runtime), stage i+2 runs only after stage i's captured tensors are released
(stage 0's down to the tensors later transitions compare against it). Observed with weak references to the very
arrays each real onnxruntime session returned."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from graphaudit.numeric.compare import CompareOptions, _Comparison, _plan
from graphaudit.numeric.schedule import StageValues
from graphaudit.pipeline import audit


@pytest.fixture(scope="module")
def cls_audit(samples):
    d = samples / "ort" / "ppocr_cls"
    return audit([d / "ppocr_cls_original.onnx", d / "ppocr_cls_optimized.onnx", d / "ppocr_cls_qdq.onnx"])


def _watch(comparison: _Comparison, log: list):
    """Wrap each runner's run so that, as stage i starts, the log gets (i, per stage: the names of its arrays
    returned before and still alive), and the arrays it returns are watched from then on."""
    alive: list[dict[str, weakref.ref]] = [{} for _ in comparison.runners]
    for i, runner in enumerate(comparison.runners):
        real = runner.run

        def run(feeds, sample=None, i=i, real=real):
            log.append((i, [{n for n, r in alive[j].items() if r() is not None} for j in range(len(alive))]))
            out = real(feeds, sample)
            alive[i] = {n: weakref.ref(v) for n, v in out.items()}
            return out

        runner.run = run
    return alive


@pytest.mark.parametrize("isolated", [False, True])
def test_a_stage_is_freed_before_the_stage_after_next_runs(cls_audit, samples, isolated):
    au = cls_audit
    comparison = _Comparison(au.stages, au.lineage.alignments,
                             _plan(au.stages, au.lineage.alignments, au.changes, isolated), CompareOptions())
    comparison.concurrent = False  # one stage after the other, as on a machine with fewer cores than stages
    log: list = []
    _watch(comparison, log)
    xs = [np.load(samples / "data" / "ppocr_cls" / "x" / f"{k}.npy") for k in (0, 1)]
    for k, x in enumerate(xs):
        values = comparison.run({"x": x}, k)
        assert isinstance(values, StageValues)
        comparison.reduce(values)
        values = None
    # stages in order, once per sample
    assert [i for i, _ in log] == [0, 1, 2, 0, 1, 2]
    captured = [set(r.output_names) for r in comparison.runners]
    ref = comparison.reference_names
    assert ref and ref < captured[0]  # stage 0 keeps a part of its tensors for the transition optimized -> qdq
    for k in (0, 1):
        first, second, third = log[3 * k: 3 * k + 3]
        assert first[1] == [set(), set(), set()]  # the sample before is wholly freed when the next one starts
        assert second[1] == [captured[0], set(), set()]  # stage 1 runs beside all of stage 0 (transition 0 reads both)
        # stage 2 runs after transition 0 is reduced: of stage 0 only the reference tensors are left, stage 1 whole
        assert third[1] == [ref, captured[1], set()]
    res = comparison.finish()
    assert [r.tensors[0].stats.samples for r in res] == [2, 2]


def test_a_region_batch_s_outputs_are_freed_before_the_next_batch_runs(cls_audit, samples, monkeypatch):
    """The isolated regions of a transition run in batches (one session each); each batch's outputs are reduced and
    freed before the next batch runs, so one batch's outputs are held at a time. Batches made small here (64 KiB
    of feeds) so that PP-OCR cls's regions make several."""
    from graphaudit.numeric import regions
    from graphaudit.numeric.batch import RegionBatch

    monkeypatch.setattr(regions, "BATCH_MAX_BYTES", 1 << 16)
    watched: list[weakref.ref] = []
    alive_at_start: list[int] = []
    real = RegionBatch.run

    def run(self, feeds):
        alive_at_start.append(sum(r() is not None for r in watched))
        got = real(self, feeds)
        watched.extend(weakref.ref(v) for outs in got.values() for v in outs)
        return got

    monkeypatch.setattr(RegionBatch, "run", run)
    au = cls_audit
    comparison = _Comparison(au.stages, au.lineage.alignments,
                             _plan(au.stages, au.lineage.alignments, au.changes, True), CompareOptions())
    x = np.load(samples / "data" / "ppocr_cls" / "x" / "0.npy")
    comparison.reduce(comparison.run({"x": x}, 0))
    assert len(alive_at_start) >= 3 and watched
    assert alive_at_start == [0] * len(alive_at_start)
    assert all(r() is None for r in watched)
    res = comparison.finish()
    assert sum(r.stats.samples for t in res for r in t.regions) >= 50  # the regions were measured



@pytest.mark.parametrize("isolated", [False, True])
@pytest.mark.parametrize("n_cores", [1, 2, 3])
def test_stage_sessions_keep_onnxruntime_s_arena_where_nothing_reuses_what_they_free(samples, monkeypatch,
                                                                                    isolated, n_cores):
    """Stage sessions run without onnxruntime's memory arena only where something runs after a stage within the
    sample and reuses what it frees: isolated regions, or stage i + 2 once stage i's values are freed (three stages
    one after the other). Two stages (side by side or not), or stages side by side, without regions hold all of a
    sample's values at once: arena-less runs only fragmented malloc's heap there (peak RSS of the bundled two-stage
    PP-OCRv4 det, 4 samples, --no-isolated: 1968 MB at 24b8125 -> 2030 MB arena-less side by side, 1973 -> 2026 MB
    one after the other; cls, 16 samples: 123.6 -> 128.0 MB, 123.5 -> 126.9 MB). Read from the real sessions'
    options; each comparison then reduces a sample."""
    from graphaudit.numeric import compare

    monkeypatch.setattr(compare, "cores", lambda: n_cores)
    d = samples / "ort" / "ppocr_cls"
    x = np.load(samples / "data" / "ppocr_cls" / "x" / "0.npy")
    for names in (["ppocr_cls_original.onnx", "ppocr_cls_qdq.onnx"],
                  ["ppocr_cls_original.onnx", "ppocr_cls_optimized.onnx", "ppocr_cls_qdq.onnx"]):
        au = audit([d / n for n in names])
        comparison = _Comparison(au.stages, au.lineage.alignments,
                                 _plan(au.stages, au.lineage.alignments, au.changes, isolated), CompareOptions())
        side_by_side = n_cores >= len(names)
        assert comparison.concurrent is side_by_side
        assert any(r for r in comparison.regions.regions) is isolated
        arena = not isolated and (side_by_side or len(names) == 2)
        arenas = [r.session.get_session_options().enable_cpu_mem_arena for r in comparison.runners]
        assert arenas == [arena] * len(names), (names, n_cores, arenas)
        comparison.reduce(comparison.run({"x": x}, 0))
        assert all(r.tensors[0].stats.samples == 1 for r in comparison.finish())
