"""``python -m graphaudit``."""

from .cli import run

if __name__ == "__main__":  # not when a --workers process (spawned) imports this module as its __mp_main__
    run()
