"""Config checks (C3xx): the conversion YAML (``AuditContext.config``) against the schema, the model, stages and data.

Every check yields nothing when the context carries no config. The logic lives in :mod:`graphaudit.config`
(``rules_schema``, ``heuristics``, ``crosscheck``); this module registers one function per rule code.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from ..config import crosscheck as X
from ..config import heuristics as H
from ..config import rules_schema as R
from ..findings import Finding
from .base import AuditContext, check

__all__ = ["CONFIG_CODES"]

#: Rule code -> function of (AuditContext) -> findings, in code order.
_RULES: dict[str, Callable[[AuditContext], Iterable[Finding]]] = {
    "C301": lambda c: R.unknown_keys(c.config),
    "C302": lambda c: R.deprecated(c.config),
    "C303": lambda c: R.wrong_types(c.config),
    "C304": lambda c: R.invalid_values(c.config),
    "C305": lambda c: R.per_input_counts(c.config, c.config_model),
    "C306": lambda c: R.channel_counts(c.config, c.config_model),
    "C307": lambda c: R.separators(c.config),
    "C308": lambda c: R.scale_and_std(c.config),
    "C309": lambda c: R.norm_type_mismatch(c.config),
    "C310": lambda c: R.type_pairs(c.config),
    "C311": lambda c: R.type_shape(c.config, c.config_model),
    "C312": lambda c: R.featuremap_norm(c.config),
    "C313": lambda c: R.bt601_needs_nv12(c.config),
    "C314": lambda c: R.input_source_type(c.config),
    "C315": lambda c: R.balance_factor(c.config),
    "C316": lambda c: R.max_percentile(c.config),
    "C317": lambda c: R.unknown_items(c.config),
    "C320": lambda c: X.input_names(c.config, c.config_model),
    "C321": lambda c: X.input_layout(c.config, c.config_model),
    "C322": lambda c: X.input_shape(c.config, c.config_model),
    "C323": lambda c: X.node_names(c.config, c.stages, c.lineage),
    "C324": lambda c: X.preprocess_mismatch(c.config, c.stages),
    "C325": lambda c: X.cal_data_dtype(c.config, c.config_model, c.config_data),
    "C326": lambda c: X.cal_data_normalized(c.config, c.config_model, c.config_data),
    "C330": lambda c: H.unit_range_normalization(c.config),
    "C331": lambda c: H.imagenet_channel_order(c.config),
    "C332": lambda c: H.name_tokens(c.config),
}

#: The config rule codes.
CONFIG_CODES = tuple(_RULES)


def _register(code: str, fn: Callable[[AuditContext], Iterable[Finding]]) -> None:
    def run(ctx: AuditContext) -> Iterator[Finding]:
        if ctx.config is None:
            return iter(())
        return iter(fn(ctx))

    run.__name__ = f"check_{code}"
    run.__doc__ = f"Rule {code} (graphaudit/rules/config.yaml): yields its findings over ``ctx.config``."
    check(code)(run)


for _code, _fn in _RULES.items():
    _register(_code, _fn)
