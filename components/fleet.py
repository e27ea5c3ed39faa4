"""`Fleet`: the stack's one component, parent of every resource (a Docker provider per host, the
images, a card component per card, the gateways and what runs beside them), and the outputs.

    settings = read_settings()
    fleet = Fleet("fleet", FleetArgs(settings, build_plan(settings)))
    fleet.outputs()   # the stack outputs
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pulumi
import pulumi_docker as docker

from components import haproxy, recycler, rollout
from components.access import check_access
from components.balancer import Balancer, BalancerArgs
from components.card import GroupRollout, NpuCard, NpuCardArgs, card_launches
from components.gateway import Gateway, GatewayArgs
from components.jobstore import JobStore, JobStoreArgs
from components.monitoring import (
    Monitoring,
    MonitoringArgs,
    prometheus_argv,
    scrape_targets,
    scrape_token,
)
from components.plan import FleetPlan, HostPlan, PaddlexInstance, port_clashes, topology_ports
from components.render.gateway import gateway_base_config, gateway_settings, gateway_upstream
from components.render.topology import topology as topology_output
from components.settings import KNOWN_KEYS, ConfigError, FleetSettings, load_settings


def read_settings(config: pulumi.Config | None = None) -> FleetSettings:
    """All of this project's config values, validated once (raises `ConfigError`).

    Each key is read through `pulumi.Config` (default: the project's namespace), as the string
    Pulumi stores (structured values as JSON text, decoded by `load_settings`). `pulumi.Config`
    reads the keys it is asked for and lists none, so the keys the stack sets beyond the known
    ones come from the config the engine hands the program: `load_settings` names such a key
    (a typo) instead of ignoring it."""
    config = config or pulumi.Config()
    keys = KNOWN_KEYS | stack_config_keys(config.name)
    values = {key: value for key in sorted(keys) if (value := config.get(key)) is not None}
    secrets = {key for key in values if pulumi.runtime.is_config_secret(config.full_key(key))}
    settings = load_settings(values, secret_keys=secrets)
    check_access(settings)
    check_environment(os.environ)
    return settings


def stack_config_keys(namespace: str) -> set[str]:
    """The keys of `namespace` the stack's config sets (the engine hands the program its config
    in PULUMI_CONFIG, `pulumi.runtime.get_config_env`)."""
    prefix = f"{namespace}:"
    return {k.removeprefix(prefix) for k in pulumi.runtime.get_config_env() if k.startswith(prefix)}


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse any DOCKER_CONTEXT in the environment, "default" included.

    pulumi-docker's containers take their engine from a context named there (terraform-provider-
    docker reads ~/.docker/contexts/meta), ahead of the provider's `host`, while images and the
    `docker` CLI of the start commands follow each host's endpoint: one host's resources would
    land on two engines. "default" is worse, not harmless: the Docker CLI's built-in default
    context has no meta.json, so the provider fails with "context 'default' not found" at the
    first container, after the images were built."""
    context = environ.get("DOCKER_CONTEXT", "")
    if context:
        raise ConfigError(
            f"environment DOCKER_CONTEXT={context!r}: pulumi-docker would take the containers' "
            "engine from that context instead of each host's endpoint (images and start commands "
            "use the endpoint), and fails outright on 'default' (\"context 'default' not found\", "
            "the CLI's built-in context has no stored endpoint); unset DOCKER_CONTEXT and give "
            "each host's engine in the stack config ('dockerHost', or 'hosts[i].endpoint')"
        )


def _upstream_entry(instance: PaddlexInstance, _url: str) -> dict[str, Any]:
    """The gateway's upstream entry of ``instance``, once its server's URL is known (ready)."""
    return gateway_upstream(instance)


A = TypeVar("A")
C = TypeVar("C", bound=pulumi.Resource)
FLEET_TYPE = "paddleocr-fleet:index:Fleet"
HOST_IMAGES_TYPE = "paddleocr-fleet:fleet:HostImages"


@dataclass
class FleetArgs:
    settings: FleetSettings
    plan: FleetPlan


class Fleet(pulumi.ComponentResource):
    """Every resource of the plan, each a child of this component: the Docker provider of each
    host, the stack's reference to its own last outputs, each host's images, the cards, the
    gateways, the recyclers, the balancer and monitoring. `outputs()` gives the stack outputs.

    Stacks deployed before the fleet was a component hold all of these at the stack's root;
    each child carries an alias to its root URN (`moved_from_root`), which its own children
    inherit, so such a stack's next update replaces nothing (the stack reference, a read, takes
    no alias: its root entry is discarded, which deletes nothing, and it is read again)."""

    def __init__(self, name: str, args: FleetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(FLEET_TYPE, name, {}, opts)
        settings, plan = args.settings, args.plan
        self.settings, self.plan = settings, plan
        self.providers = {host.name: self._docker_provider(host) for host in plan.hosts}
        previous = previous_topology(self._child_opts())
        guard = port_guard(plan, previous)
        limit = rollout.WaveLimit(settings.max_unavailable_groups, settings.max_unavailable_cards)
        waits = previous.apply(
            lambda topology: rollout.group_waits(plan, rollout.cards_in_topology(topology), limit)
        )
        self.images = {
            host.name: self._on_host(
                HostImages,
                host,
                "-images",
                HostImagesArgs(
                    host,
                    vllm=settings.vllm_image or host.kind.vllm_image,
                    paddlex=settings.paddlex_image or host.kind.paddlex_image,
                    guard=guard,
                ),
                moved=False,
            )
            for host in plan.hosts
            if plan.cards_of(host.name)
        }
        token_file = gateway_settings(settings).auth.local_token_file
        self.cards: list[NpuCard] = []
        in_service: dict[rollout.GroupKey, Any] = {}

        def after(
            found: dict[rollout.GroupKey, list[rollout.GroupKey]], key: rollout.GroupKey
        ) -> list[Any]:
            return [in_service[k] for k in found[key]]

        for card in plan.cards:
            images = self.images[card.host.name]
            keys = rollout.group_keys(card)
            groups = {}
            for vllm, key in zip(card.vllm, keys, strict=True):
                drain, undrain = rollout.group_commands(
                    plan, card, vllm, settings.drain_timeout, token_file
                )
                groups[vllm.port] = GroupRollout(
                    drain, undrain, waits.apply(functools.partial(after, key=key))
                )
            npu = self._on_host(
                NpuCard,
                card.host,
                f"-card-{card.card}",
                NpuCardArgs(
                    card,
                    *card_launches(settings, card),
                    vllm_image=images.vllm.image_id,
                    paddlex_image=images.paddlex.image_id,
                    groups=groups,
                ),
            )
            in_service.update(zip(keys, npu.in_service, strict=True))
            self.cards.append(npu)
        servers = [server for card in self.cards for server in card.paddlex]
        upstreams = {
            instance: server.url.apply(functools.partial(_upstream_entry, instance))
            for server, instance in zip(servers, plan.paddlex, strict=True)
        }
        token = recycler.recycler_token(
            settings, pulumi.ResourceOptions(parent=self, aliases=moved_from_root())
        )
        admin_tokens = [] if token is None else [recycler.admin_token_entry(token)]
        self.job_store: JobStore | None = None
        if plan.job_store is not None:
            self.job_store = self._on_host(
                JobStore,
                plan.job_store.host,
                "-jobstore",
                JobStoreArgs(
                    plan.job_store,
                    data_dir=stack_dir(settings.jobs_store_data_dir, "postgres"),
                    guard=guard,
                ),
                moved=False,
            )
        self.gateways = [
            self._on_host(
                Gateway,
                gateway.host,
                "-gateway",
                GatewayArgs(
                    gateway,
                    base_config=gateway_base_config(settings),
                    jobs_dir=stack_dir(settings.gateway_jobs_dir, "jobs"),
                    upstreams=[upstreams[p] for p in plan.paddlex_of(gateway)],
                    image=settings.gateway_image,
                    guard=guard,
                    admin_tokens=admin_tokens,
                    store_url=None if self.job_store is None else self.job_store.url_for(gateway),
                ),
            )
            for gateway in plan.gateways
        ]
        self.recyclers = self._recyclers(token, guard) if settings.recycle else []
        self.balancer: Balancer | None = None
        if plan.balancer is not None:
            self.balancer = self._on_host(
                Balancer,
                plan.balancer.host,
                "-balancer",
                BalancerArgs(
                    plan.balancer,
                    config=haproxy.balancer_config(settings, plan),
                    image=settings.balancer_settings.image,
                    gateways=[g.url for g in self.gateways],
                    guard=guard,
                ),
            )
        self.monitoring: Monitoring | None = None
        if plan.monitoring is not None:
            host = plan.monitoring.host
            self.monitoring = Monitoring(
                f"{host.name}-monitoring",
                MonitoringArgs(
                    plan.monitoring,
                    targets=scrape_targets(plan),
                    argv=prometheus_argv(settings, plan.monitoring),
                    token=scrape_token(settings),
                    image=settings.prometheus_image,
                    data_dir=stack_dir(settings.prometheus_data_dir, "prometheus"),
                    waits=[server.url for card in self.cards for server in card.vllm],
                    exporter_providers={
                        h.name: self.providers[h.name]
                        for h in plan.monitoring.exporter_hosts
                        if h.name != host.name
                    },
                    guard=guard,
                ),
                pulumi.ResourceOptions(
                    parent=self, provider=self.providers[host.name], aliases=moved_from_root()
                ),
            )
        self.register_outputs({"providers": [p.urn for p in self.providers.values()]})

    def _child_opts(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, aliases=moved_from_root())

    def _docker_provider(self, host: HostPlan) -> docker.Provider:
        """The provider keeps its URN through the aliases: a provider whose URN changed would
        make every resource on it a replacement."""
        return docker.Provider(
            f"docker-{host.name}",
            host=host.endpoint,
            opts=pulumi.ResourceOptions(
                parent=self, aliases=moved_from_root(f"docker-{old}" for old in host.former_names)
            ),
        )

    def _on_host(
        self,
        component: Callable[[str, A, pulumi.ResourceOptions], C],
        host: HostPlan,
        suffix: str,
        args: A,
        moved: bool = True,
    ) -> C:
        """The child `component` named `{host}{suffix}`, on `host`'s Docker provider. A renamed
        host (`hosts[i].formerNames`) keeps its resources: the old names with the same suffix
        are aliases, inherited by every child whose name starts with its parent's. `moved`: it
        sat at the stack's root before the fleet was a component (False: it is new since)."""
        former = [f"{old}{suffix}" for old in host.former_names]
        opts = pulumi.ResourceOptions(
            parent=self,
            provider=self.providers[host.name],
            aliases=moved_from_root(former) if moved else [pulumi.Alias(name=n) for n in former],
        )
        return component(f"{host.name}{suffix}", args, opts)

    def _recyclers(
        self, token: pulumi.Output[str] | None, guard: pulumi.Output[str]
    ) -> list[recycler.Recycler]:
        """A recycler on each host with cards, once its gateway and its cards are there."""
        by_host = {p.host.name: g for p, g in zip(self.plan.gateways, self.gateways, strict=True)}
        out = []
        for host in self.plan.hosts:
            if not self.plan.cards_of(host.name):
                continue
            local = by_host.get(host.name)
            image = local.image if local is not None else self.settings.gateway_image
            # the gateways are ready once every PaddleX is: nothing is drained before
            waits: list[pulumi.Resource] = [g.ready for g in self.gateways]
            if local is not None:
                waits += local.cleanups
            out.append(
                self._on_host(
                    recycler.Recycler,
                    host,
                    "-recycler",
                    recycler.RecyclerArgs(
                        host,
                        recycler.render_config(
                            self.settings, self.plan, host, with_token=token is not None
                        ),
                        recycler.container_name(self.settings, host),
                        image,
                        token,
                        guard,
                        waits,
                    ),
                )
            )
        return out

    def outputs(self) -> dict[str, object]:
        """`gateway_url` is where clients send documents: the one gateway, or the balancer
        (then `gateways` lists every gateway)."""
        outputs: dict[str, object] = {
            "upstreams": [server.url for card in self.cards for server in card.paddlex],
            "vllm_endpoints": [server.url for card in self.cards for server in card.vllm],
        }
        if self.balancer is None:
            outputs["gateway_url"] = self.gateways[0].url
        else:
            outputs["gateway_url"] = self.balancer.url
            outputs["gateways"] = [g.url for g in self.gateways]
        if self.monitoring is not None:
            outputs["prometheus_url"] = self.monitoring.url
        if self.job_store is not None:
            outputs["jobs_store"] = self.job_store.location
        # the gateways' and keepers' containers carry their generation in their names
        plan_names = [g.container_name for g in self.plan.gateways]
        plan_names += [g.keeper.container_name for g in self.plan.gateways if g.keeper]
        actual = [g.container_name for g in self.gateways]
        actual += [g.keeper.container_name for g in self.gateways if g.keeper]
        stack = pulumi.get_stack()
        outputs["topology"] = pulumi.Output.all(*actual).apply(
            lambda names: topology_output(
                self.settings, self.plan, stack, dict(zip(plan_names, names, strict=True))
            )
        )
        return outputs


@dataclass
class HostImagesArgs:
    host: HostPlan
    vllm: str
    paddlex: str
    guard: pulumi.Output[str]
    """Resolves when the plan may be applied: no image is pulled before."""


class HostImages(pulumi.ComponentResource):
    """The vLLM and PaddleX images of one host, each its own resource: a missing image is pulled
    once, with a timeout that fits images of many GB, before any container is created (not inside
    each container's create). Kept on the host when the stack lets go of them. On the Docker
    provider of its opts."""

    PULL_TIMEOUT = "3h"

    def __init__(self, name: str, args: HostImagesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(HOST_IMAGES_TYPE, name, {}, opts)
        self.vllm = self._image(args, "vllm", args.vllm)
        self.paddlex = self._image(args, "paddlex", args.paddlex)
        self.register_outputs({"vllm": self.vllm.image_id, "paddlex": self.paddlex.image_id})

    def _image(self, args: HostImagesArgs, role: str, image: str) -> docker.RemoteImage:
        host = args.host
        return docker.RemoteImage(
            f"{host.name}-{role}-image",
            name=args.guard.apply(lambda _: image),
            keep_locally=True,
            platform=host.platform,
            opts=pulumi.ResourceOptions(
                parent=self,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=self.PULL_TIMEOUT, update=self.PULL_TIMEOUT
                ),
                # the images sat at the stack's root before they had this component
                aliases=moved_from_root(f"{old}-{role}-image" for old in host.former_names),
            ),
        )


def stack_dir(given: str | None, leaf: str) -> str:
    """`given`, or by default the host folder `leaf` of this stack's own (its state outlives its
    containers: the gateways' jobs, the job store's and Prometheus' data)."""
    return given or f"/var/lib/paddleocr-fleet/{pulumi.get_stack()}/{leaf}"


def moved_from_root(former_names: Iterable[str] = ()) -> list[pulumi.Alias]:
    """The aliases of a child of the fleet that sat at the stack's root before the fleet was a
    component: there under its name or a former one (a renamed host), and under a former name
    here. Its own children inherit them (the engine derives their old URNs from their parent's
    aliases)."""
    former = list(former_names)
    return [
        pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE),
        *(pulumi.Alias(name=name, parent=pulumi.ROOT_STACK_RESOURCE) for name in former),
        *(pulumi.Alias(name=name) for name in former),
    ]


def previous_topology(opts: pulumi.ResourceOptions | None = None) -> pulumi.Output[Any]:
    """This stack's own `topology` output as its last update left it (None on a new stack):
    what runs now, before this update changes it."""
    stack = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    previous = pulumi.StackReference(f"{pulumi.get_stack()}-previous", stack_name=stack, opts=opts)
    return previous.get_output("topology")


def port_guard(plan: FleetPlan, previous: pulumi.Output[Any]) -> pulumi.Output[str]:
    """Resolves once the plan is known not to move a server onto a port another running server
    holds (read from this stack's own last `topology` output); fails the update otherwise. Every
    image, and so every container, waits for it: a refused plan changes nothing."""

    def check(topology: Any) -> str:
        clashes = port_clashes(topology_ports(topology or {}), plan)
        if clashes:
            raise ConfigError(
                "config keys 'vllmBasePort/paddlexBasePort/portStride/portFirstCard/gatewayPort/"
                f"keeperPort': the new port plan moves servers onto ports that other running "
                f"servers hold until they are replaced: {'; '.join(clashes[:5])}"
                f"{' ...' if len(clashes) > 5 else ''}. Pulumi replaces servers in parallel, so "
                "they would clash. Move in two steps, first to ports no running server holds "
                "(e.g. other base ports), then to the ones you want; or `pulumi destroy` first."
            )
        return ""

    return previous.apply(check)
