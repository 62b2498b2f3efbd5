"""The dense first stage: a bi-encoder, its embedding cache and its index (`stage`), and the artefacts it keeps in
the cache beside the embeddings (`cache`: approximate index files, int8 ranges, query vectors)."""

from harness.pipeline.dense.stage import dense_stage

__all__ = ["dense_stage"]
