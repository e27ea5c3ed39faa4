"""What the worker processes of one gateway share: the board in shared memory.

:mod:`~gateway.shared.occupancy` holds, for every worker, the attempts in flight per upstream,
the requests in flight per token, the waiter it serves next, the drains and its wake-up, so that
limits and dispatch hold over the whole gateway, not per process. A single-process gateway has
no board.
"""
