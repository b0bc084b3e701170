"""How a keyspace's leader reshapes and balances its slices (the planner's settings)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from workgroup.errors import ConfigError


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """The planner's knobs; the defaults are Google Slicer's.

    - ``imbalance_tolerance``: a member may carry up to ``1 + tolerance`` times
      its fair share of the load (its capacity's share); a slice hotter than
      ``tolerance`` times the mean member's share is split (it would keep the
      busiest member above the band wherever it went).
    - ``min_slices_per_member``, ``max_slices_per_member``: the slice count
      stays between these times the number of members (splits stop at the upper
      bound; cold neighbours merge down to the lower one).
    - ``churn_budget``: the share of the hash space whose owner may change in
      one round (slices whose owner left are not counted: they have none to keep).
    """

    imbalance_tolerance: float = 0.1
    min_slices_per_member: int = 50
    max_slices_per_member: int = 150
    churn_budget: float = 0.1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.imbalance_tolerance) and self.imbalance_tolerance > 0):
            raise ConfigError(
                f"imbalance_tolerance must be above 0, not {self.imbalance_tolerance}"
            )
        if not 1 <= self.min_slices_per_member <= self.max_slices_per_member:
            raise ConfigError(
                "slices per member need 1 <= min <= max, not "
                f"min {self.min_slices_per_member}, max {self.max_slices_per_member}"
            )
        if not 0 <= self.churn_budget <= 1:
            raise ConfigError(
                f"churn_budget is a share of the key space in [0, 1], not {self.churn_budget}"
            )


__all__ = ["PlannerSettings"]
