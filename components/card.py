"""`NpuCard`: one accelerator card with its vLLM servers and the PaddleX servers bound to them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_command as command

from components.paddlex import PaddlexServer, PaddlexServerArgs
from components.plan import CardPlan
from components.render.paddlex import PaddlexLaunch, paddlex_launch
from components.render.vllm import VllmLaunch, vllm_launch
from components.settings import FleetSettings
from components.vllm import VllmServer, VllmServerArgs


@dataclass
class NpuCardArgs:
    card: CardPlan
    vllm: dict[int, VllmLaunch]
    """Each vLLM's launch, by port."""
    paddlex: dict[int, PaddlexLaunch]
    """Each PaddleX's launch, by port."""
    vllm_image: pulumi.Input[str]
    paddlex_image: pulumi.Input[str]
    drain: str = "true"
    """Shell command that takes the card's PaddleX instances out of service at the gateways and
    waits for their work in flight (`components.rollout.drain_command`)."""
    undrain: str = "true"
    """Shell command that takes them back in."""
    after: pulumi.Input[list[pulumi.Resource]] | None = None
    """The cards of the rollout's previous wave (their `in_service` steps): this card's
    containers are replaced only after those are back in service."""


class NpuCard(pulumi.ComponentResource):
    """A card (an Ascend NPU by default; a GPU or a simulated card by the host's kind).

    Its PaddleX servers start only after the vLLM their pipeline config names is ready. Its
    `in_service` step drains the card at the gateways before any of its containers is deleted
    (its `delete`; Pulumi deletes it first, as it depends on them all) and takes it back in once
    every server is ready (its `create`).
    """

    vllm: list[VllmServer]
    paddlex: list[PaddlexServer]
    in_service: command.local.Command

    def __init__(self, name: str, args: NpuCardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:NpuCard", name, {}, opts)
        self.vllm, self.paddlex = [], []
        for vllm in args.card.vllm:
            server = VllmServer(
                f"{name}-vllm-{vllm.index}",
                VllmServerArgs(args.vllm[vllm.port], args.vllm_image, args.after),
                _slot_opts(self, f"{name}-vllm-{vllm.port}"),
            )
            self.vllm.append(server)
            for paddlex in args.card.bound_to(vllm):
                self.paddlex.append(
                    PaddlexServer(
                        f"{name}-paddlex-{paddlex.index}",
                        PaddlexServerArgs(
                            args.paddlex[paddlex.port],
                            args.paddlex_image,
                            server,
                            args.after,
                        ),
                        _slot_opts(self, f"{name}-paddlex-{paddlex.port}"),
                    )
                )
        servers: list[VllmServer | PaddlexServer] = [*self.vllm, *self.paddlex]
        self.in_service = command.local.Command(
            f"{name}-in-service",
            create=args.undrain,
            delete=args.drain,
            # A changed drain or undrain alone runs `create` again in place: an idempotent undrain.
            triggers=[s.container.id for s in servers],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[s.ready for s in servers],
                delete_before_replace=True,
            ),
        )
        self.register_outputs(
            {
                "vllm_urls": [s.url for s in self.vllm],
                "paddlex_urls": [s.url for s in self.paddlex],
            }
        )


def _slot_opts(parent: NpuCard, port_name: str) -> pulumi.ResourceOptions:
    """Servers are named by their slot on the card, so a port-plan change replaces containers in
    place (deleted before created) instead of renaming them (created before the old ones go).
    Stacks created when names carried the port are adopted through an alias."""
    return pulumi.ResourceOptions(parent=parent, aliases=[pulumi.Alias(name=port_name)])


def card_launches(
    settings: FleetSettings, card: CardPlan
) -> tuple[dict[int, VllmLaunch], dict[int, PaddlexLaunch]]:
    """The launches of `card`'s servers, by port (for `NpuCardArgs`)."""
    return (
        {v.port: vllm_launch(settings, v) for v in card.vllm},
        {p.port: paddlex_launch(settings, p) for p in card.paddlex},
    )
