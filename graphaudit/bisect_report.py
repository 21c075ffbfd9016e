"""The result of ``graphaudit bisect``: typed records, ``to_dict()`` / ``from_dict()`` at the JSON edge."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BISECT_SCHEMA_VERSION", "BisectUnitRecord", "BisectStepRecord", "BisectReport"]

#: Layout of :meth:`BisectReport.to_dict`.
BISECT_SCHEMA_VERSION = "1.1"  # 1.1: fix_budget, fix_evaluations, data_unreadable


@dataclass
class BisectUnitRecord:
    """One splice unit: changes of the transition reverted together (they share b nodes).

    Attributes
    ----------
    changes : list of int
        Indices into the transition's changes (the report's ``transitions[pair].changes`` order of classification).
    kind, pattern : str
        Of the unit's first change, e.g. ``"inserted"``, ``"HzCalibration(activation)"``.
    a_nodes, b_nodes : list of str
        Node names of stage a and stage b in the unit.
    isolated_sqnr_db : float or None
        The unit's worst isolated SQNR (dB; b's nodes of the change fed a's values), None when not measured.
    """

    changes: list[int]
    kind: str
    pattern: str
    a_nodes: list[str]
    b_nodes: list[str]
    isolated_sqnr_db: float | None = None


@dataclass
class BisectStepRecord:
    """One hybrid evaluation: the units reverted (indices into ``BisectReport.units``), the share of the drop it
    recovered, the metric it measured (output SQNR in dB against stage a, or the user's metric) and the phase."""

    units: list[int]
    recovered: float
    metric: float
    phase: str
    kept: bool


@dataclass
class BisectReport:
    """What ``bisect`` measured on one transition a -> b.

    Attributes
    ----------
    a, b : str
        Stage names; ``pair`` the transition's index.
    metric : str
        ``"output SQNR (dB)"`` or the name the eval hook returned.
    metric_a, metric_b : float
        The metric of stage a and of stage b (for output SQNR: inf and b's SQNR against a).
    samples : int
        Samples each evaluation ran.
    runtime : str
        Runtime that ran stage a and every hybrid.
    target : float
        Share of the drop to recover; ``budget`` the most hybrid evaluations.
    units : list of BisectUnitRecord
        The revertible units, worst isolated error first (the search order).
    not_revertible : int
        Changes (not kept) outside every revertible unit.
    steps : list of BisectStepRecord
    chosen : list of int
        The final set (indices into ``units``).
    recovered, metric_chosen : float
        Its share of the drop recovered and its metric; ``reached`` whether the share reaches ``target``.
    fix_recovered : float or None
        The share of the drop the fix is predicted to recover, measured on a model that does what the fix asks (the
        chosen HzCalibration nodes quantizing to int16 at their thresholds, with what hb_mapper changes along with
        them: :func:`graphaudit.numeric.int16fix.int16_calibration`), not on the float hybrid; None when the fix is
        not a hb_mapper setting.
    fix_units : list of int
        The units the fix names (indices into ``units``): ``chosen``, or the result of a second search with the
        fix's own model as the oracle when int16 at the chosen units would win back less than half of ``recovered``.
    fix : dict or None
        The setting to paste (:class:`graphaudit.fixes.FixSuggestion` as a dict: ``toolchain``, ``text``,
        ``nodes``, ``note``, ``lint``).
    data_unreadable : list of str
        Data files left out because they cannot be read, or fed (NaN or infinite values, left out as the numeric
        comparison leaves them out), one line each naming the file and the problem (the samples are the other
        files').
    fix_budget, fix_evaluations : int
        1.1: the most evaluations of int16 models the fix may add after the search (its prediction, and a second
        search of at most ``budget`` when the prediction is weak: ``budget + 1`` where a unit holds an
        HzCalibration, else 0), and how many ran. ``budget + fix_budget`` is the bound ``bisect`` states up front.
    """

    a: str
    b: str
    pair: int
    metric: str
    metric_a: float
    metric_b: float
    samples: int
    runtime: str
    target: float
    budget: int
    units: list[BisectUnitRecord] = field(default_factory=list)
    not_revertible: int = 0
    steps: list[BisectStepRecord] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    recovered: float = 0.0
    metric_chosen: float = 0.0
    reached: bool = False
    fix: dict | None = None
    fix_recovered: float | None = None
    fix_units: list[int] = field(default_factory=list)
    data_unreadable: list[str] = field(default_factory=list)
    fix_budget: int = 0
    fix_evaluations: int = 0

    def chosen_units(self) -> list[BisectUnitRecord]:
        """The units of the final set."""
        return [self.units[k] for k in self.chosen]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready layout (``schema_version`` first; infinite floats as the strings ``"inf"``/``"-inf"``)."""
        d = asdict(self)
        for key in ("metric_a", "metric_b", "metric_chosen"):
            d[key] = _finite(d[key])
        for s in d["steps"]:
            s["metric"] = _finite(s["metric"])
        return {"schema_version": BISECT_SCHEMA_VERSION, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BisectReport":
        """Inverse of :meth:`to_dict`."""
        d = {k: v for k, v in d.items() if k != "schema_version"}
        for key in ("metric_a", "metric_b", "metric_chosen"):
            d[key] = float(d[key])
        return cls(**{**d, "units": [BisectUnitRecord(**u) for u in d.get("units", [])],
                      "steps": [BisectStepRecord(**{**s, "metric": float(s["metric"])}) for s in d.get("steps", [])]})


def _finite(x: float) -> float | str:
    return x if x == x and abs(x) != float("inf") else str(x)
