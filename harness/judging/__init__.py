"""Building an eval set: judgment pools from several systems (`pool`), the blind judging page (`page`),
merging the judgments made (`merge`), their agreement (`agreement`) and coverage (`coverage`).

Sits above `harness.pipeline` (a pool's runs come from `harness.pipeline.retrieve`) and below the CLI.
"""
