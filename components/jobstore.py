"""`JobStore`: the stack's own PostgreSQL (config `jobsStore: postgres`), the one job store of
every gateway (gateway/jobs/postgres.py).

Debian's PostgreSQL on the project's base image (config/postgres/, built on its host), its data
in a host folder that outlives the container (`initdb` on the first start, as the user
postgres), the role `fleet` and its database `fleet`. The role's password is made once per
stack and kept, a secret, in the stack's state (as the recyclers' token: components/recycler.py);
it reaches the container as a file (not an environment variable, which `docker inspect` shows)
and each gateway inside its config, which is then a secret too.

Where it listens: on its host's loopback when every gateway is on its host; else on every
address, TCP with SCRAM-SHA-256 password authentication only (config/postgres/start.sh writes
pg_hba.conf). Not on the host's plan address: that is where the other hosts reach the host
(`hosts[i].address`, taken from the Docker endpoint), which may be a name or a NAT address that
no interface of the host holds, and PostgreSQL refuses to start on an address it cannot bind.

    store = JobStore("local-jobstore", JobStoreArgs(plan.job_store, data_dir, guard), opts)
    store.url_for(gateway_plan)      # a secret Output, resolved once it accepts connections
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import pulumi
import pulumi_command as command
import pulumi_docker as docker

from components import containers
from components.images import BuildSpec, build_image
from components.plan import CONFIG_DIR_IN_CONTAINER, GatewayPlan, JobStorePlan
from components.recycler import TOKEN_COMMAND

POSTGRES_BUILD = BuildSpec(context="config/postgres", repository="paddleocr-fleet/postgres")
DATA_DIR_IN_CONTAINER = "/var/lib/postgresql/data"
PASSWORD_PATH = f"{CONFIG_DIR_IN_CONTAINER}/postgres.password"
ROLE = DATABASE = "fleet"
READY_TIMEOUT_S = 120


def store_url(password: str, address: str, port: int) -> str:
    """The gateways' `jobs.store_url` (the password is hex: nothing to escape)."""
    return f"postgresql://{ROLE}:{password}@{address}:{port}/{DATABASE}"


def ready_command(store: JobStorePlan, container: str) -> str:
    """Waits, bounded, until the server accepts connections on its port (`pg_isready` inside
    the container: the host's loopback, wherever `pulumi` runs); fails fast when the container
    stops, naming its log."""
    name = shlex.quote(container)
    probe = ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(store.port), "-U", ROLE]
    check = shlex.join(["docker", "exec", container, *probe, "-d", DATABASE])
    hint = f"its log: docker logs {container}"
    return "\n".join(
        [
            f"deadline=$(( $(date +%s) + {READY_TIMEOUT_S} ))",
            f"until {check}; do",
            f"  if [ \"$(docker inspect -f '{{{{.State.Running}}}}' {name} 2>/dev/null)\" "
            '!= "true" ]; then',
            f"    echo {shlex.quote(f'PostgreSQL ({container}) is not running; {hint}')} >&2",
            "    exit 1",
            "  fi",
            '  if [ "$(date +%s)" -ge "$deadline" ]; then',
            f"    echo {shlex.quote(f'PostgreSQL ({container}) not ready on port {store.port} after {READY_TIMEOUT_S} s; {hint}')} >&2",  # noqa: E501
            "    exit 1",
            "  fi",
            "  sleep 1",
            "done",
            f"echo {shlex.quote(f'PostgreSQL ready on {store.host.name}:{store.port}')}",
        ]
    )


@dataclass
class JobStoreArgs:
    plan: JobStorePlan
    data_dir: str
    """The host folder of its data (`jobsStoreDataDir`)."""
    guard: pulumi.Output[str] | None = None
    """Resolves when the plan may be applied; the image build waits for it."""


class JobStore(pulumi.ComponentResource):
    """The image, the password, the container and its readiness wait; on the Docker provider of
    its opts (its host's)."""

    def __init__(self, name: str, args: JobStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:JobStore", name, {}, opts)
        store = self.plan = args.plan
        image, cleanup = build_image(self, f"{name}-image", POSTGRES_BUILD, store.host, args.guard)
        made = command.local.Command(
            f"{name}-password",
            create=TOKEN_COMMAND,
            logging=command.local.Logging.NONE,
            opts=pulumi.ResourceOptions(parent=self, additional_secret_outputs=["stdout"]),
        )
        self.password: pulumi.Output[str] = pulumi.Output.secret(made.stdout)
        self.container = containers.host_container(
            name,
            container_name=store.container_name,
            image=image,
            command=[str(store.port), store.listen_addresses],
            volumes=[
                docker.ContainerVolumeArgs(
                    host_path=args.data_dir, container_path=DATA_DIR_IN_CONTAINER
                )
            ],
            uploads=[docker.ContainerUploadArgs(file=PASSWORD_PATH, content=self.password)],
            labels=containers.labels("postgres", store.host, None, store.port),
            opts=containers.child_opts(self, depends_on=[cleanup]),
        )
        self.ready = command.local.Command(
            f"{name}-ready",
            create=self.container.name.apply(lambda c: ready_command(store, c)),
            environment=store.host.docker_env,
            triggers=[
                self.container.id,
                containers.last_started(self.container, store.container_name, store.host),
            ],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.container]),
        )
        self.location = self.ready.stdout.apply(
            lambda _: {
                "host": store.host.name,
                "address": store.host.address,
                "port": store.port,
                "container": store.container_name,
                "database": DATABASE,
                "user": ROLE,
            }
        )
        """Where it runs, for the stack output (never the password)."""
        self.register_outputs({"location": self.location})

    def url_for(self, gateway: GatewayPlan) -> pulumi.Output[str]:
        """`gateway`'s `jobs.store_url`: a secret, resolved once the server is ready."""
        address, port = self.plan.address_for(gateway), self.plan.port
        return pulumi.Output.secret(
            pulumi.Output.all(self.password, self.ready.stdout).apply(
                lambda found: store_url(found[0], address, port)
            )
        )
