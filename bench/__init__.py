"""Benchmarks for paddleocr-fleet (never timed unit tests). See docs/benchmarks.md."""
