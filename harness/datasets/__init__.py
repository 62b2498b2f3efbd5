"""Datasets: the BEIR registry, the data dir, converting your tables, validating folders."""
