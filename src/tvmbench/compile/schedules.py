"""The tuned schedules a compile applies (opened by the tuning layer, applied here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TunedSchedules:
    """The MetaSchedule databases to apply, already opened and reduced to the target's records by
    the tuning layer (``tuning.database.load_databases``): compile never opens a database itself."""

    databases: list[Any] = field(default_factory=list)  # MetaSchedule Database objects
    digest: str = "none"  # of the applied records, for the cache key
    infos: list[dict[str, Any]] = field(default_factory=list)  # per source: what was applied or why not

    def union(self) -> Any | None:
        """One database to apply: the only one, or their union (the fastest record wins)."""
        if not self.databases:
            return None
        if len(self.databases) == 1:
            return self.databases[0]
        from tvm.s_tir import meta_schedule as ms

        return ms.database.UnionDatabase(*self.databases)
