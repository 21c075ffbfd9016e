"""``python -m graphaudit``."""

from .cli import main

raise SystemExit(main())
