"""CPU of one dispatch: leasing and releasing an upstream of the gateway's pool, in-process.

    python -m bench.dispatch_cost                 # 48 upstreams, queue mode, as bench.proxy_cpu
    python -m bench.dispatch_cost --upstreams 384 --busy 0.5
    python -m bench.dispatch_cost --workers 2     # the pool of one of 2 workers (shared board)

The pool gets the benchmark fleet's config (host, card and vLLM of every upstream, so the
topology-aware key has something to read) and a service time for every upstream; then
``--rounds`` acquire + release pairs are timed with ``busy`` of the upstreams held, and the
microseconds per pair printed (the best of ``--repeat`` runs: the machine is shared).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.common import parser
from bench.procs import gateway_config
from gateway.config.settings import parse_settings
from gateway.dispatch.pool import UpstreamPool
from gateway.shared.occupancy import Board


async def cost_us(upstreams: int, busy: float, rounds: int, workers: int = 1) -> float:
    """Microseconds of CPU per acquire + release with ``busy`` of the upstreams leased; with
    ``workers`` > 1 the pool is worker 0's over a shared board (the other workers idle)."""
    urls = [f"http://127.0.0.1:{20000 + i}" for i in range(upstreams)]
    settings = parse_settings(gateway_config(urls, "queue"))
    if workers == 1:
        return await _timed(UpstreamPool(settings), busy, rounds)
    with tempfile.TemporaryDirectory() as run_dir:
        board = Board(workers, Path(run_dir))
        try:
            return await _timed(UpstreamPool(settings, seat=board.seat(0)), busy, rounds)
        finally:
            board.close()


async def _timed(pool: UpstreamPool, busy: float, rounds: int) -> float:
    upstreams = len(pool.upstreams)
    for i in range(4 * upstreams):  # a service time for each, a little spread
        lease = await pool.acquire()
        pool.release(lease, "success", 0.01 + (i % 7) * 0.001)
    held = [await pool.acquire() for _ in range(int(busy * upstreams))]
    start = time.process_time()
    for _ in range(rounds):
        pool.release(await pool.acquire(), "success", 0.01)
    spent = time.process_time() - start
    for lease in held:
        pool.release(lease, "success", 0.01)
    return spent / rounds * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = parser("dispatch_cost", __doc__)
    ap.add_argument("--upstreams", type=int, default=48)
    ap.add_argument("--busy", type=float, default=0.0, help="share of upstreams held")
    ap.add_argument("--rounds", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=1, help="1, or a shared board's size")
    args = ap.parse_args(argv)
    runs = [
        asyncio.run(cost_us(args.upstreams, args.busy, args.rounds, args.workers))
        for _ in range(args.repeat)
    ]
    print(
        f"{args.upstreams} upstreams, {args.busy:.0%} busy, {args.workers} worker(s): "
        f"{min(runs):.1f} us per "
        f"acquire + release (runs: {', '.join(f'{r:.1f}' for r in runs)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
