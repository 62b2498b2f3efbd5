"""Encoder runtimes built on the retrieval layer's ONNX export: OpenVINO (`harness.runtimes.openvino_backend`).

A layer of its own, above `harness.retrieval` (whose package is full) and below the pipeline that loads them.
"""
