"""Triton kernels with numpy references, timed on a GPU to calibrate the latency models."""
