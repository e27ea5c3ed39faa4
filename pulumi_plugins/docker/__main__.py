"""Entry point: `python -m pulumi_plugins.docker [flags] ENGINE_ADDRESS` (as the engine starts
a resource plugin: it prints its port on the first line of stdout and serves until killed)."""

from __future__ import annotations

import sys

from pulumi.runtime.proto import provider_pb2_grpc

from pulumi_plugins import rpc
from pulumi_plugins.docker.server import DockerProvider


def main(argv: list[str]) -> None:
    engine = rpc.engine_address(argv)
    provider = DockerProvider(engine)
    rpc.serve(provider_pb2_grpc.add_ResourceProviderServicer_to_server, provider, engine=engine)


if __name__ == "__main__":
    main(sys.argv[1:])
