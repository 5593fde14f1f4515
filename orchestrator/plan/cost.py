"""The campaign's predicted node-hours and cost, for `orch plan`'s summary: the runs' predicted
run times (orchestrator/predict/perfmodel/) on their nodes, priced by each site's profile (``price``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.plan.resolve import charged_devices

if TYPE_CHECKING:
    from orchestrator.plan.record import PlannedRun


@dataclass
class CampaignCost:
    runs: int = 0  # runnable runs
    predicted: int = 0  # of which with a predicted run time
    node_hours: float = 0.0
    cost: dict[str, float] = field(default_factory=dict)  # by currency
    unpriced: int = 0  # predicted runs on a site without a price

    def lines(self) -> list[str]:
        if not self.predicted:
            return []
        money = ", ".join(f"{amount:,.4g} {currency}" for currency, amount in sorted(self.cost.items()))
        text = (f"predicted: {self.node_hours:.3g} node-hours for {self.predicted} of {self.runs} runnable run(s)"
                + (f", {money}" if money else "")
                + (f" ({self.unpriced} run(s) on sites without a price)" if self.unpriced else ""))
        return [text + "; steps only, without start-up or queue time"]

    def as_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "with_prediction": self.predicted, "node_hours": self.node_hours,
                "cost": self.cost, "unpriced_runs": self.unpriced}


def campaign_cost(plans: list["PlannedRun"]) -> CampaignCost:
    out = CampaignCost()
    for plan in plans:
        resolved, placement = plan.resolved, plan.resolved.placement
        if placement is None:
            continue
        out.runs += 1
        if resolved.predicted_run_s is None:
            continue
        out.predicted += 1
        hours = resolved.predicted_run_s / 3600 * placement.nodes
        out.node_hours += hours
        price = resolved.site.price
        if price is None:
            out.unpriced += 1
            continue
        charged = charged_devices(resolved) or resolved.spec.devices
        rate = price.device_hour(resolved.site.device.per_node) * charged
        out.cost[price.currency] = out.cost.get(price.currency, 0.0) + resolved.predicted_run_s / 3600 * rate
    return out
