"""vLLM simulator: a `vllm serve` look-alike for accelerator-free fleets (no real model)."""
