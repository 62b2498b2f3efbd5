"""Retrieval stages: encoders and devices, vector indexes, BM25, learned sparse, reranking, fusion."""
