"""gateway.server.memory: the malloc thresholds are set in a real process, and change what it
does."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gateway.server.memory import keep_large_buffers

# A request's large buffers, as the gateway makes them for a 1.3 MB body: uvicorn's body
# buffer grown by 64 KB reads, the message copied out of it, the joined body, the base64 sliced
# out of it and the pieces written on; the minor page faults of 50 such requests.
PROBE = textwrap.dedent(
    """
    import resource, sys
    from gateway.server.memory import keep_large_buffers
    if sys.argv[1] == "tuned":
        assert keep_large_buffers()
    chunk = b"x" * 65536
    def request():
        body = bytearray()
        for _ in range(21):
            body += chunk
        joined = b"".join([bytes(body)])
        return len(b"".join([b"head", joined[10:-10]]))
    request()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        request()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def faults(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_large_buffers_are_reused_instead_of_faulted_in_again() -> None:
    assert keep_large_buffers() is True
    plain, tuned = faults("plain"), faults("tuned")
    assert plain > 50 * 300  # fresh pages for every request's buffers
    assert tuned < 50  # the same pages, reused
