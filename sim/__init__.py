"""Simulated accelerators: stand-ins for vLLM and PaddleX that need no NPU or GPU.

`sim.vllm` is a `vllm serve` look-alike, `sim.paddlex` a `paddlex --serve` look-alike that
runs the genuine PaddleX serving app over a stand-in pipeline. Neither does real OCR.
"""
