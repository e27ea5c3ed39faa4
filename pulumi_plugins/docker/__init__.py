"""Our `docker` resource provider: the part of pulumi-docker 5.1.0 the fleet uses, with the
real provider's semantics, against the real Docker engine.

Served as plugin `docker` 5.1.0::

    python -m pulumi_plugins.docker [flags] ENGINE_ADDRESS

Install it for a Pulumi home with an executable wrapper::

    #!/bin/sh
    PYTHONPATH=/work/main exec /work/main/.venv/bin/python -m pulumi_plugins.docker "$@"

    pulumi plugin install resource docker 5.1.0 --file WRAPPER

Resources: `docker:index/container:Container` and `docker:index/remoteImage:RemoteImage`
(terraform-provider-docker behind the Pulumi bridge in the real provider) and
`docker:index/image:Image` (pulumi-docker's native build resource). Docker is reached only
through the `docker` CLI with DOCKER_HOST set to the provider's endpoint and no DOCKER_CONTEXT
(`engine`), so ssh:// endpoints work as `docker exec` does.

What the real provider does for this subset, and where it was read, is in REAL_PROVIDER.md
next to this file; modules: `server` (gRPC), `config` (endpoint resolution), `engine` (docker
CLI and Engine API), `props` (Terraform-style check/diff), `container_schema` + `container`,
`image` + `context_digest`, `remote_image`.
"""

VERSION = "5.1.0"
