"""The dense first stages: a bi-encoder, its embedding cache and its index (`stage`), the artefacts it keeps in the
cache beside the embeddings (`cache`: approximate index files, int8 ranges, query vectors), and a multi-vector
(late-interaction) model searched by exact MaxSim (`multivector`)."""

from harness.pipeline.dense.multivector import multi_vector_stage
from harness.pipeline.dense.stage import dense_stage

__all__ = ["dense_stage", "multi_vector_stage"]
