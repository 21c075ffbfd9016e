"""Rule checks: one small function per rule code, registered in :data:`CHECKS`."""

from __future__ import annotations

from .base import CHECKS, AuditContext, check, run_checks
from . import config, inputs, numeric, structure  # noqa: F401  (register the C3xx, S1xx, P2xx and N4xx checks)

__all__ = ["CHECKS", "AuditContext", "check", "run_checks"]
