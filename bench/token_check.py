"""CPU cost of the gateway's bearer-token check per request (gateway.access.control).

    python -m bench.token_check            # 1, 8 and 64 configured tokens
    python -m bench.token_check --tokens 200 --rounds 50000

Times ``Access.authenticate`` (SHA-256 of the presented token, constant-time comparison with
every configured digest) plus ``admit``/``release`` (the per-token quota bookkeeping with
``max_in_flight`` and ``rate_per_s`` set), in process CPU time, for a token that matches the
last configured one and for a wrong token.
"""

from __future__ import annotations

import contextlib
import hashlib
import time

from bench.common import parser
from gateway.access.control import Access
from gateway.config.settings import AuthSettings
from gateway.errors import AccessError


def measure(tokens: int, rounds: int) -> dict[str, float]:
    secrets = [f"team-{n}-" + "x" * 40 for n in range(tokens)]
    auth = AuthSettings.model_validate(
        {
            "tokens": [
                {
                    "name": f"team-{n}",
                    "sha256": hashlib.sha256(s.encode()).hexdigest(),
                    "max_in_flight": 10**9,
                    "rate_per_s": 1e12,
                }
                for n, s in enumerate(secrets)
            ]
        }
    )
    access = Access(auth)
    good, bad = f"Bearer {secrets[-1]}", "Bearer " + "y" * 46
    started = time.process_time()
    for _ in range(rounds):
        principal = access.authenticate(good, admin=False)
        access.admit(principal)
        access.release(principal)
    accepted = (time.process_time() - started) / rounds
    started = time.process_time()
    for _ in range(rounds):
        with contextlib.suppress(AccessError):
            access.authenticate(bad, admin=False)
    refused = (time.process_time() - started) / rounds
    return {"accepted_us": accepted * 1e6, "refused_us": refused * 1e6}


def main() -> None:
    ap = parser("token_check", __doc__)
    ap.add_argument("--tokens", type=int, nargs="*", default=[1, 8, 64])
    ap.add_argument("--rounds", type=int, default=100_000)
    args = ap.parse_args()
    for count in args.tokens:
        result = measure(count, args.rounds)
        print(
            f"{count:4d} tokens: accepted {result['accepted_us']:.2f} us CPU/request "
            f"(authenticate + admit + release), refused {result['refused_us']:.2f} us"
        )


if __name__ == "__main__":
    main()
