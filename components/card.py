"""`NpuCard`: one accelerator card with its vLLM servers and the PaddleX servers bound to them."""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_command as command

from components.paddlex import PaddlexServer, PaddlexServerArgs
from components.plan import CardPlan
from components.render.paddlex import PaddlexLaunch, paddlex_launch
from components.render.vllm import VllmLaunch, vllm_launch
from components.settings import FleetSettings
from components.vllm import VllmServer, VllmServerArgs


@dataclass
class GroupRollout:
    """How one vLLM group of the card rolls (`components.rollout`)."""

    drain: str = "true"
    """Shell command that takes the group's PaddleX instances out of service at the gateways
    and waits for their work in flight (`components.rollout.drain_command`)."""
    undrain: str = "true"
    """Shell command that takes them back in."""
    after: pulumi.Input[list[pulumi.Resource]] | None = None
    """The groups of the rollout's previous wave (their `in_service` steps): this group's
    containers are replaced only after those are back in service."""


@dataclass
class NpuCardArgs:
    card: CardPlan
    vllm: dict[int, VllmLaunch]
    """Each vLLM's launch, by port."""
    paddlex: dict[int, PaddlexLaunch]
    """Each PaddleX's launch, by port."""
    vllm_image: pulumi.Input[str]
    paddlex_image: pulumi.Input[str]
    groups: dict[int, GroupRollout] = field(default_factory=dict)
    """Each vLLM group's rollout, by its vLLM's port (none given: no drain, no wait)."""


class NpuCard(pulumi.ComponentResource):
    """A card (an Ascend NPU by default; a GPU or a simulated card by the host's kind).

    Its PaddleX servers start only after the vLLM their pipeline config names is ready. Each
    vLLM group (a vLLM and the PaddleX bound to it) has an `in_service` step that drains the
    group at the gateways before any of its containers is deleted (its `delete`; Pulumi deletes
    it first, as it depends on them all) and takes it back in once every server of the group is
    ready (its `create`).
    """

    vllm: list[VllmServer]
    paddlex: list[PaddlexServer]
    in_service: list[command.local.Command]
    """The groups' steps, in the order of the card's vLLM."""

    def __init__(self, name: str, args: NpuCardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("paddleocr-fleet:fleet:NpuCard", name, {}, opts)
        self.vllm, self.paddlex, self.in_service = [], [], []
        for vllm in args.card.vllm:
            rollout = args.groups.get(vllm.port, GroupRollout())
            server = VllmServer(
                f"{name}-vllm-{vllm.index}",
                VllmServerArgs(args.vllm[vllm.port], args.vllm_image, rollout.after),
                _slot_opts(self, f"{name}-vllm-{vllm.port}"),
            )
            self.vllm.append(server)
            group: list[VllmServer | PaddlexServer] = [server]
            for paddlex in args.card.bound_to(vllm):
                group.append(
                    PaddlexServer(
                        f"{name}-paddlex-{paddlex.index}",
                        PaddlexServerArgs(
                            args.paddlex[paddlex.port],
                            args.paddlex_image,
                            server,
                            rollout.after,
                        ),
                        _slot_opts(self, f"{name}-paddlex-{paddlex.port}"),
                    )
                )
            self.paddlex.extend(s for s in group if isinstance(s, PaddlexServer))
            self.in_service.append(_in_service(self, f"{name}-vllm-{vllm.index}", group, rollout))
        servers: list[VllmServer | PaddlexServer] = [*self.vllm, *self.paddlex]
        # Retired: the card's own step of the card-by-card rollout. Stacks deployed before
        # keep it as a no-op (updated in place: its triggers are as before), so its old `delete`,
        # a drain of the whole card, never runs.
        command.local.Command(
            f"{name}-in-service",
            create="true",
            delete="true",
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


def _in_service(
    parent: NpuCard,
    name: str,
    servers: list[VllmServer | PaddlexServer],
    rollout: GroupRollout,
) -> command.local.Command:
    return command.local.Command(
        f"{name}-in-service",
        create=rollout.undrain,
        delete=rollout.drain,
        # A changed drain or undrain alone runs `create` again in place: an idempotent undrain.
        triggers=[s.container.id for s in servers],
        opts=pulumi.ResourceOptions(
            parent=parent,
            depends_on=[s.ready for s in servers],
            delete_before_replace=True,
        ),
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
