"""Schedule sources: where the schedule an operator is measured with comes from.

- ``default``: tvmbench's default rules (the first that applies, as the compile pipeline picks);
- ``tuned``: the record a tuning database has for the kernel's workload, where one has one;
- ``sampled:N``: N points drawn at random from MetaSchedule's design space for the kernel (the
  space its CPU search explores), each built and timed alone. OpBench's "schedule
  configurations" axis: how far apart a workload's good and bad schedules are, and where the
  default and tuned ones sit among them. Sample ``k`` is drawn with seed ``k``, so a resumed
  collection draws the same schedules and skips those already stored.

A measurement's ``schedule`` column holds ``default``, ``tuned`` or ``sampled:k`` (k = 1..N).
"""

from __future__ import annotations

from typing import Any

from tvmbench.errors import UserError
from tvmbench.targets import ResolvedTarget
from tvmbench.tuning.space import sampled_schedules

__all__ = ["MAX_SAMPLES", "decisions", "parse_sources", "sample_count", "sampled_schedules", "tuned_schedule"]

MAX_SAMPLES = 64


def parse_sources(items: Any) -> tuple[str, ...]:
    """``default,tuned,sampled:8`` as a tuple of sources, each checked; a bad one is a UserError."""
    names = [s.strip() for s in (items.split(",") if isinstance(items, str) else items) if s.strip()]
    for s in names:
        if s in ("default", "tuned"):
            continue
        n = s.partition(":")[2]
        if not (s.startswith("sampled:") and n.isdigit() and 1 <= int(n) <= MAX_SAMPLES):
            raise UserError(f"unknown schedule source '{s}'; use default, tuned or sampled:N "
                            f"(N from 1 to {MAX_SAMPLES})")
    if not names:
        raise UserError("give at least one schedule source: default, tuned or sampled:N")
    return tuple(dict.fromkeys(names))


def sample_count(sources: tuple[str, ...]) -> int:
    """N of ``sampled:N`` (the largest if given twice), 0 without one."""
    return max((int(s.partition(":")[2]) for s in sources if s.startswith("sampled:")), default=0)


def tuned_schedule(func: Any, databases: list[Any], target: ResolvedTarget) -> Any | None:
    """The schedule of the first database with a record for ``func``'s workload, or None."""
    from tvm.s_tir.meta_schedule.tune_context import _normalize_mod

    mod = _normalize_mod(func)
    for db in databases:
        if db.has_workload(mod):
            with target.tvm() as tvm_target:
                sch = db.query_schedule(mod, tvm_target, workload_name="main")
            if sch is not None:
                return sch
    return None


def decisions(sch: Any) -> dict[str, Any]:
    """What a schedule chose, from its trace: split factors (a sampled tile's values resolved),
    how many loops it parallelised, vectorised and unrolled, MetaSchedule's parallel / vectorize /
    unroll annotations, and each sampling instruction's decision in trace order."""
    out: dict[str, Any] = {"splits": [], "parallel": 0, "vectorize": 0, "unroll": 0}
    if sch is None:
        return out
    made = sch.trace.decisions
    values: dict[str, Any] = {}  # a sampling instruction's output variable -> the value it drew
    sampled = []
    for inst in sch.trace.insts:
        kind = inst.kind.name
        if inst in made:
            decision = _plain(made[inst])
            sampled.append([str(kind), decision])
            if kind == "SamplePerfectTile":
                values.update({str(o): v for o, v in zip(inst.outputs, decision, strict=False)})
            elif kind == "SampleCategorical" and inst.outputs:
                values[str(inst.outputs[0])] = _plain(inst.attrs[0][decision])
        if kind == "Split":
            out["splits"].append([values.get(str(x), _plain(x)) for x in inst.inputs[1:]])
        elif kind in ("Parallel", "Vectorize", "Unroll"):
            out[kind.lower()] += 1
        elif kind == "Annotate" and str(inst.attrs[0]).startswith("meta_schedule."):
            # MetaSchedule's parallel extent, vector width and unroll depth, applied by postprocessors
            key = str(inst.attrs[0]).removeprefix("meta_schedule.")
            out.setdefault("annotations", {})[key] = values.get(str(inst.inputs[1]), _plain(inst.inputs[1]))
    if sampled:
        out["sampled"] = sampled
    return out


def _plain(x: Any) -> Any:
    """A trace value as JSON: ints, lists of ints, None, else its text."""
    if x is None or isinstance(x, bool | int | float | str):
        return x
    try:
        return int(x)
    except (TypeError, ValueError):
        pass
    try:
        return [_plain(v) for v in x]
    except TypeError:
        return str(x)
