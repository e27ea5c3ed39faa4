"""The stack: one Docker provider per host, a card component per card, the gateway, the outputs."""

from __future__ import annotations

import pulumi
import pulumi_docker as docker

from components import render
from components.card import NpuCard, NpuCardArgs
from components.gateway import Gateway, GatewayArgs
from components.plan import FleetPlan, HostPlan
from components.settings import FleetSettings, load_settings


def read_settings() -> FleetSettings:
    """All of this project's config values, validated once (raises `ConfigError`)."""
    from pulumi.runtime import config as runtime_config

    prefix = f"{pulumi.get_project()}:"
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    return load_settings({k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)})


class Fleet:
    """Builds every resource of the plan; `outputs()` gives the stack outputs."""

    def __init__(self, settings: FleetSettings, plan: FleetPlan):
        self.settings, self.plan = settings, plan
        self.providers = {host.name: _provider(host) for host in plan.hosts}
        self.cards: list[NpuCard] = []
        for card in plan.cards:
            kind = card.host.kind
            self.cards.append(
                NpuCard(
                    f"{card.host.name}-card-{card.card}",
                    NpuCardArgs(
                        settings,
                        card,
                        vllm_image=settings.vllm_image or kind.vllm_image,
                        paddlex_image=settings.paddlex_image or kind.paddlex_image,
                        provider=self.providers[card.host.name],
                    ),
                )
            )
        servers = [server for card in self.cards for server in card.paddlex]
        self.gateway = Gateway(
            f"{plan.gateway.host.name}-gateway",
            GatewayArgs(
                settings,
                plan.gateway,
                upstreams=[
                    server.url.apply(lambda _, p=instance: render.gateway_upstream(p))
                    for server, instance in zip(servers, plan.paddlex, strict=True)
                ],
                image=settings.gateway_image,
                provider=self.providers[plan.gateway.host.name],
            ),
        )

    def outputs(self) -> dict[str, object]:
        return {
            "upstreams": [server.url for card in self.cards for server in card.paddlex],
            "vllm_endpoints": [server.url for card in self.cards for server in card.vllm],
            "gateway_url": self.gateway.url,
            "topology": render.topology(self.settings, self.plan),
        }


def _provider(host: HostPlan) -> docker.Provider:
    return docker.Provider(f"docker-{host.name}", host=host.endpoint)
