"""Named queries of the operator store, for users who want an answer without writing SQL."""

from __future__ import annotations

from typing import Any

from tvmbench.errors import UserError
from tvmbench.profiling.store import OpStore

# A model's operators by their share of its time inside the model (default schedules, the most
# recent machine, versions and thread count that measured it).
TOP = """
SELECT o.kind, mo.kernel, mo.count, m.median_us * mo.count AS us_per_inference,
       100.0 * m.median_us * mo.count / SUM(m.median_us * mo.count) OVER () AS share_percent,
       o.flops * mo.count / (m.median_us * mo.count) / 1e3 AS gflops, o.intensity, o.workload
FROM model_ops mo
JOIN models md ON md.id = mo.model_id
JOIN operators o ON o.workload = mo.workload
JOIN measurements m ON m.id = (SELECT MAX(id) FROM measurements WHERE workload = mo.workload
                                 AND context = 'in_model' AND schedule = :schedule AND threads = :threads)
WHERE md.name = :model
ORDER BY us_per_inference DESC
"""


# The same operators against the machine's roofline: achieved GFLOP/s per call, the attainable
# bound min(peak, intensity x slope) for the thread count, and the share of it reached. The slope
# is the bandwidth of the nearest cache level that holds the operator's bytes (``cache_slopes``),
# memory's (DRAM) past the last (the cache-aware roofline: ``measure.peak.Bandwidth``).
ROOFLINE = """
WITH ops AS (
SELECT o.kind, mo.kernel, mo.count, m.median_us, o.intensity, o.flops, o.workload, r.peak_gflops, r.bandwidth_gbs,
       {slope} AS slope_gbs, {level} AS data_from
FROM model_ops mo
JOIN models md ON md.id = mo.model_id
JOIN operators o ON o.workload = mo.workload
JOIN measurements m ON m.id = (SELECT MAX(id) FROM measurements WHERE workload = mo.workload
                                 AND context = 'in_model' AND schedule = :schedule AND threads = :threads)
JOIN rooflines r ON r.machine_id = m.machine_id AND r.threads = m.threads
WHERE md.name = :model AND o.flops > 0)
SELECT kind, kernel, 100.0 * median_us * count / SUM(median_us * count) OVER () AS share_percent,
       intensity, flops / (median_us * 1e3) AS gflops,
       MIN(peak_gflops, intensity * slope_gbs) AS bound_gflops,
       100.0 * (flops / (median_us * 1e3)) / MIN(peak_gflops, intensity * slope_gbs) AS percent_of_bound,
       CASE WHEN intensity * slope_gbs < peak_gflops THEN 'memory' ELSE 'compute' END AS bound_by,
       data_from, slope_gbs, peak_gflops, bandwidth_gbs, workload
FROM ops
ORDER BY share_percent DESC
"""
_NEAREST = ("(SELECT s.{column} FROM cache_slopes s WHERE s.machine_id = r.machine_id AND s.threads = r.threads "
            "AND s.capacity_bytes >= o.bytes ORDER BY s.capacity_bytes LIMIT 1)")


def roofline(store: OpStore, model: str, threads: int | None = None, schedule: str = "default"
             ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The model's operators against the roofline (``ROOFLINE``; memory's slope alone for a
    store written before it had cache slopes, opened read-only)."""
    if store.db.execute("SELECT 1 FROM sqlite_master WHERE name = 'cache_slopes'").fetchone():
        sql = ROOFLINE.format(slope=f"COALESCE({_NEAREST.format(column='gbs')}, r.bandwidth_gbs)",
                              level=f"COALESCE({_NEAREST.format(column='level')}, 'DRAM')")
    else:
        sql = ROOFLINE.format(slope="r.bandwidth_gbs", level="'DRAM'")
    return store.query(sql, {"schedule": schedule, "threads": threads or _threads(store, model), "model": model})


def top(store: OpStore, model: str, threads: int | None = None, schedule: str = "default"
        ) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The model's operators by share of its time (``TOP``); ``threads`` default: the most
    measured thread count."""
    return store.query(TOP, {"schedule": schedule, "threads": threads or _threads(store, model), "model": model})


def _threads(store: OpStore, model: str) -> int:
    """The thread count the model was measured with most (the largest on a tie)."""
    _, rows = store.query("SELECT m.threads FROM measurements m JOIN model_ops mo ON mo.workload = m.workload "
                          "JOIN models md ON md.id = mo.model_id WHERE md.name = ? "
                          "GROUP BY m.threads ORDER BY COUNT(*) DESC, m.threads DESC LIMIT 1", (model,))
    if not rows:
        raise UserError(f"the operator store has no measurements of '{model}'; run 'tvmbench ops collect "
                        f"--models {model}' first")
    return int(rows[0][0])


def show(store: OpStore, workload: str) -> tuple[dict[str, Any], tuple[list[str], list[tuple[Any, ...]]]]:
    """One operator's features and every measurement of it."""
    columns, rows = store.query("SELECT * FROM operators WHERE workload = ?", (workload,))
    if not rows:
        raise UserError(f"no operator with workload {workload} in the store; 'tvmbench ops top --model M' lists them")
    features = dict(zip(columns, rows[0], strict=True))
    measured = store.query(
        "SELECT mc.cpu_model, mc.isa, v.tvmbench, v.tvm, m.schedule, m.threads, m.context, m.median_us, m.samples, "
        "m.decisions FROM measurements m JOIN machines mc ON mc.id = m.machine_id "
        "JOIN versions v ON v.id = m.versions_id WHERE m.workload = ? ORDER BY m.threads, m.schedule, m.context",
        (workload,))
    return features, measured
