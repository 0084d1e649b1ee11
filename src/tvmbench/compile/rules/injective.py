"""Injective: functions of elementwise, broadcast, layout and padding blocks get one loop nest
per block, split over cores when large enough to pay for the thread launch, vectorised inside."""

from __future__ import annotations

from typing import Any

from tvmbench.compile.rules.base import Rule, normalized, schedule_every_block


class Injective(Rule):
    """Parallel, vectorised elementwise/layout loops."""

    reductions = (0, 0)

    def schedule(self, func: Any, target: Any) -> Any:
        found = normalized(func)
        if found is None or not all(b.is_injective() for b in found[1]):
            return None
        return schedule_every_block(*found, target)
