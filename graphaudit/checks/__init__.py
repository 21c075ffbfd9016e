"""Rule checks: one small function per rule code, registered in :data:`CHECKS`."""

from __future__ import annotations

from .base import CHECKS, AuditContext, check, run_checks
from . import structure  # noqa: F401  (registers the S1xx checks)

__all__ = ["CHECKS", "AuditContext", "check", "run_checks"]
