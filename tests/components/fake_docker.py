"""A stand-in `docker` CLI for running rendered commands for real without an engine.

Each call is appended as a JSON line to $FAKE_DOCKER_LOG. `inspect -f ...` prints
$FAKE_DOCKER_RUNNING (default "true"), or fails as for a missing container when
$FAKE_DOCKER_MISSING is set; `exec [-d|-i] NAME CMD...` runs CMD on this machine as if
the container were the host (in the background for -d, with stdin passed through for -i).
"""

import json
import os
import subprocess
import sys


def main() -> int:
    args = sys.argv[1:]
    with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"argv": args, "DOCKER_HOST": os.environ.get("DOCKER_HOST")}) + "\n")
    if args[:1] == ["inspect"]:
        if os.environ.get("FAKE_DOCKER_MISSING"):
            print(f"Error: No such container: {args[-1]}", file=sys.stderr)
            return 1
        print(os.environ.get("FAKE_DOCKER_RUNNING", "true"))
        return 0
    if args[:1] == ["exec"]:
        rest = args[1:]
        detach = interactive = False
        while rest and rest[0].startswith("-"):
            detach |= rest[0] == "-d"
            interactive |= rest[0] == "-i"
            rest = rest[2:] if rest[0] in ("-u", "--user", "-e", "-w") else rest[1:]
        command = rest[1:]
        if detach:
            subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
            return 0
        return subprocess.run(command, stdin=sys.stdin if interactive else None).returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
