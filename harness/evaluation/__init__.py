"""Scores: the metric table and pytrec_eval, significance tests."""
