"""Rule checks: one function per rule code, listed in the table :data:`RULES` (``checks/table.py``)."""

from __future__ import annotations

from .base import AuditContext
from .table import CONFIG_CODES, RULES, run_checks

__all__ = ["RULES", "CONFIG_CODES", "AuditContext", "run_checks"]
