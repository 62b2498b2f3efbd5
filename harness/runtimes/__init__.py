"""Encoder runtimes (``--backend``): the registry of their records (`harness.runtimes.registry`), the encoder spec
that loads through it, ONNX Runtime and OpenVINO, and the ``auto`` probe. Above the retrieval layer, whose torch
encoder they run, and below the pipeline that loads them.
"""
