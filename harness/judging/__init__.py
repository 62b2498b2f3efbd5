"""Building an eval set: judgment pools from several systems (`pool`) and the blind judging page (`page`).

Sits above `harness.pipeline` (a pool's runs come from `harness.pipeline.retrieve`) and below the CLI.
"""
