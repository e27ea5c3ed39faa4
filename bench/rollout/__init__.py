"""What clients see while the fleet changes: the rolling-update benchmark (issue 21).

``python -m bench.rollout`` deploys sim stacks on the real Pulumi engine, keeps clients sending
documents through the gateway, applies one change at a time (a vLLM flag, a PaddleX pipeline
setting, a gateway image, recycling one card), rolling and all at once, and reports failed
requests, the capacity floor, p99 latency during against before, and how long each change took.
:mod:`bench.rollout.load` (the clients and the capacity sampler) also serves the end-to-end
tests of the rollout.
"""
