"""`orch predict`'s what-ifs: a machine the site profile does not describe (study E).

- ``nodes``: more nodes than the profile's ``max_nodes`` (study E's 16,384 GPUs on a site of
  eight nodes): the devices may be up to ``nodes`` x the devices of a node. Nothing else changes:
  the same node, the same network per node.
- ``nvlink_domain``: the devices one NVLink/NVSwitch-class domain joins (the profile's
  ``network.fast_domain``): 4 (a Perlmutter node), 8 (a DGX), 64 or 72 (rack-scale NVL domains).
  Collectives within the domain run at the profile's ``fast_gbs``; beyond it over the nodes' NICs.

A prediction with either is labelled WHAT-IF in the table's header and carries ``what_if`` in
``--json`` (with the profile's own values beside the assumed ones); without them ``what_if`` is null.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from orchestrator.errors import UserError
from orchestrator.predict.perfmodel.machine import Machine


@dataclass(frozen=True)
class WhatIf:
    nodes: int | None = None
    nvlink_domain: int | None = None

    def __post_init__(self) -> None:
        for flag, value in (("--what-if-nodes", self.nodes), ("--nvlink-domain", self.nvlink_domain)):
            if value is not None and value < 1:
                raise UserError(f"{flag} {value}: expected a whole number >= 1")

    @property
    def active(self) -> bool:
        return self.nodes is not None or self.nvlink_domain is not None

    def max_nodes(self, profile_max: int) -> int:
        return profile_max if self.nodes is None else self.nodes

    def machine(self, machine: Machine) -> Machine:
        return machine if self.nvlink_domain is None else replace(machine, fast_domain=self.nvlink_domain)

    def as_json(self, profile_max_nodes: int, profile_domain: int) -> dict[str, Any] | None:
        if not self.active:
            return None
        return {"what_if": True, "nodes": self.nodes, "profile_max_nodes": profile_max_nodes,
                "nvlink_domain": self.nvlink_domain, "profile_nvlink_domain": profile_domain}

    def line(self, profile_max_nodes: int, profile_domain: int) -> str | None:
        """The header's label, or None when nothing is assumed."""
        if not self.active:
            return None
        parts = []
        if self.nodes is not None:
            parts.append(f"{self.nodes} nodes (the profile has at most {profile_max_nodes})")
        if self.nvlink_domain is not None:
            parts.append(f"an NVLink domain of {self.nvlink_domain} devices (the profile's: {profile_domain})")
        return "WHAT-IF, not the site as profiled: " + "; ".join(parts)
