"""The stack: one Docker provider per host, a card component per card, the gateway, the outputs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pulumi
import pulumi_docker as docker

from components import recycler, render, rollout
from components.access import check_access
from components.balancer import Balancer, BalancerArgs
from components.card import NpuCard, NpuCardArgs
from components.gateway import Gateway, GatewayArgs
from components.monitoring import Monitoring, MonitoringArgs
from components.plan import FleetPlan, HostPlan, port_clashes, topology_ports
from components.settings import ConfigError, FleetSettings, load_settings


def read_settings() -> FleetSettings:
    """All of this project's config values, validated once (raises `ConfigError`)."""
    from pulumi.runtime import config as runtime_config

    prefix = f"{pulumi.get_project()}:"
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    values = {k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)}
    secrets = {k for k in values if runtime_config.is_config_secret(prefix + k)}
    settings = load_settings(values, secret_keys=secrets)
    check_access(settings)
    check_environment(os.environ)
    return settings


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


class Fleet:
    """Builds every resource of the plan; `outputs()` gives the stack outputs."""

    def __init__(self, settings: FleetSettings, plan: FleetPlan):
        self.settings, self.plan = settings, plan
        self.providers = {host.name: _provider(host) for host in plan.hosts}
        previous = previous_topology()
        guard = port_guard(plan, previous)
        waits = previous.apply(
            lambda topology: rollout.card_waits(
                plan, rollout.cards_in_topology(topology), settings.max_unavailable_cards
            )
        )
        self.images = {
            host.name: HostImages(settings, host, self.providers[host.name], guard)
            for host in plan.hosts
            if plan.cards_of(host.name)
        }
        token_file = render.gateway_settings(settings).auth.local_token_file
        self.cards: list[NpuCard] = []
        by_key: dict[rollout.CardKey, NpuCard] = {}
        for card in plan.cards:
            images = self.images[card.host.name]
            key = (card.host.name, card.card)

            def after(
                found: dict[rollout.CardKey, list[rollout.CardKey]],
                key: rollout.CardKey = key,
            ) -> list[Any]:
                return [by_key[k].in_service for k in found[key]]

            by_key[key] = NpuCard(
                f"{card.host.name}-card-{card.card}",
                NpuCardArgs(
                    settings,
                    card,
                    vllm_image=images.vllm.image_id,
                    paddlex_image=images.paddlex.image_id,
                    provider=self.providers[card.host.name],
                    drain=rollout.drain_command(plan, card, settings.drain_timeout, token_file),
                    undrain=rollout.undrain_command(plan, card, token_file),
                    after=waits.apply(after),
                ),
                _former_names(card.host, f"-card-{card.card}"),
            )
            self.cards.append(by_key[key])
        servers = [server for card in self.cards for server in card.paddlex]
        upstreams = {
            instance: server.url.apply(lambda _, p=instance: render.gateway_upstream(p))
            for server, instance in zip(servers, plan.paddlex, strict=True)
        }
        token = recycler.recycler_token(settings)
        admin_tokens = [] if token is None else [recycler.admin_token_entry(token)]
        self.gateways = [
            Gateway(
                f"{gateway.host.name}-gateway",
                GatewayArgs(
                    settings,
                    gateway,
                    upstreams=[upstreams[p] for p in plan.paddlex_of(gateway)],
                    image=settings.gateway_image,
                    provider=self.providers[gateway.host.name],
                    guard=guard,
                    admin_tokens=admin_tokens,
                ),
                _former_names(gateway.host, "-gateway"),
            )
            for gateway in plan.gateways
        ]
        self.recyclers = self._recyclers(token, guard) if settings.recycle else []
        self.balancer: Balancer | None = None
        if plan.balancer is not None:
            host = plan.balancer.host
            self.balancer = Balancer(
                f"{host.name}-balancer",
                BalancerArgs(
                    settings,
                    plan,
                    gateways=[g.url for g in self.gateways],
                    provider=self.providers[host.name],
                    guard=guard,
                ),
                _former_names(host, "-balancer"),
            )
        self.monitoring: Monitoring | None = None
        if plan.monitoring is not None:
            host = plan.monitoring.host
            self.monitoring = Monitoring(
                f"{host.name}-monitoring",
                MonitoringArgs(
                    settings,
                    plan,
                    waits=[server.url for card in self.cards for server in card.vllm],
                    providers=self.providers,
                    guard=guard,
                ),
            )

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
                recycler.Recycler(
                    f"{host.name}-recycler",
                    recycler.RecyclerArgs(
                        self.settings,
                        self.plan,
                        host,
                        image,
                        token,
                        self.providers[host.name],
                        guard,
                        waits,
                    ),
                    _former_names(host, "-recycler"),
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
        # the gateways' and keepers' containers carry their generation in their names
        plan_names = [g.container_name for g in self.plan.gateways]
        plan_names += [g.keeper.container_name for g in self.plan.gateways if g.keeper]
        actual = [g.container_name for g in self.gateways]
        actual += [g.keeper.container_name for g in self.gateways if g.keeper]
        stack = pulumi.get_stack()
        outputs["topology"] = pulumi.Output.all(*actual).apply(
            lambda names: render.topology(
                self.settings, self.plan, stack, dict(zip(plan_names, names, strict=True))
            )
        )
        return outputs


class HostImages:
    """The vLLM and PaddleX images of one host, each its own resource: a missing image is pulled
    once, with a timeout that fits images of many GB, before any container is created (not inside
    each container's create). Kept on the host when the stack lets go of them."""

    PULL_TIMEOUT = "3h"

    def __init__(
        self,
        settings: FleetSettings,
        host: HostPlan,
        provider: docker.Provider,
        guard: pulumi.Output[str],
    ):
        kind = host.kind
        vllm, paddlex = settings.vllm_image or kind.vllm_image, settings.paddlex_image
        self.vllm = self._image(host, "vllm", vllm, provider, guard)
        self.paddlex = self._image(host, "paddlex", paddlex or kind.paddlex_image, provider, guard)

    def _image(
        self,
        host: HostPlan,
        role: str,
        name: str,
        provider: docker.Provider,
        guard: pulumi.Output[str],
    ) -> docker.RemoteImage:
        return docker.RemoteImage(
            f"{host.name}-{role}-image",
            name=guard.apply(lambda _: name),
            keep_locally=True,
            platform=host.platform,
            opts=pulumi.ResourceOptions(
                provider=provider,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=self.PULL_TIMEOUT, update=self.PULL_TIMEOUT
                ),
                aliases=[pulumi.Alias(name=f"{old}-{role}-image") for old in host.former_names],
            ),
        )


def previous_topology() -> pulumi.Output[Any]:
    """This stack's own `topology` output as its last update left it (None on a new stack):
    what runs now, before this update changes it."""
    stack = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    previous = pulumi.StackReference(f"{pulumi.get_stack()}-previous", stack_name=stack)
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


def _provider(host: HostPlan) -> docker.Provider:
    return docker.Provider(
        f"docker-{host.name}",
        host=host.endpoint,
        opts=pulumi.ResourceOptions(
            aliases=[pulumi.Alias(name=f"docker-{old}") for old in host.former_names]
        ),
    )


def _former_names(host: HostPlan, suffix: str) -> pulumi.ResourceOptions:
    """A renamed host (`hosts[i].formerNames`) keeps its resources: the old names are aliases,
    inherited by every child whose name starts with its parent's."""
    return pulumi.ResourceOptions(
        aliases=[pulumi.Alias(name=f"{old}{suffix}") for old in host.former_names]
    )
