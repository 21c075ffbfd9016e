"""``python -m graphaudit``."""

from .cli import run

run()
