"""Fallback: tried after DLight's rules. Whatever is still unscheduled gets its leading spatial
loops spread over the cores and its elementwise blocks vectorised, so no function runs as one
scalar loop nest on one core."""

from __future__ import annotations

from typing import Any

from tvmbench.compile.rules.base import Rule, normalized, schedule_every_block


class Fallback(Rule):
    """Parallel outer loops for whatever is left."""

    def schedule(self, func: Any, target: Any) -> Any:
        found = normalized(func)
        return schedule_every_block(*found, target) if found is not None else None
