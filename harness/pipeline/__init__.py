"""The pipeline: evaluate a dataset, bench grids, fusing saved results, crosscheck, env."""
