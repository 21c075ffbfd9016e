"""Example eval hooks for ``graphaudit --eval`` (README "Your own metric (--eval)")."""
