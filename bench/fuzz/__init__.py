"""Fuzzing suite: generators of hostile inputs for every kind graphaudit reads, and a capped runner (README "Fuzzing")."""
