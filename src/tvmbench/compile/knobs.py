"""The default rules' choices as knobs, so tuning can search around the expert default.

A CPU rule computes its choices (register tile rows and vectors, the order of the tiles, whether
a short window is unrolled, a band's rows) from the target and the shapes. Each such choice goes
through :func:`knob` with its computed default and its legal values. Outside a :func:`knob_set`
block that returns the default and costs nothing; inside one, the choice is recorded (name,
default, legal values) and an override given for it is used instead, when legal. Droplet
(``tuning/droplet.py``) moves these knobs one at a time from the default values, builds each
neighbour with the rule and times it: the search starts from the hand-written schedule instead
of random points of MetaSchedule's design space. The schedule built is an ordinary trace, kept
in the database as a tuning record like any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Knob:
    name: str
    default: Any
    choices: tuple[Any, ...]  # legal values, in order (Droplet's neighbours are the adjacent ones)


@dataclass
class KnobSet:
    overrides: dict[str, Any] = field(default_factory=dict)
    seen: list[Knob] = field(default_factory=list)  # the knobs the rule read, in order

    def values(self) -> dict[str, Any]:
        """The value each knob read took (the override where legal, else the default)."""
        return {k.name: self.overrides[k.name] if self.overrides.get(k.name) in k.choices else k.default
                for k in self.seen}


_ACTIVE: ContextVar[KnobSet | None] = ContextVar("tvmbench_knobs", default=None)


def knob(name: str, default: Any, choices: Sequence[Any]) -> Any:
    """A rule's choice ``name``: ``default``, or the active knob set's override when it is one of
    ``choices`` (the default is always legal)."""
    active = _ACTIVE.get()
    if active is None:
        return default
    legal = tuple(dict.fromkeys([*choices, default]))  # ordered, the default included
    if isinstance(default, int) and not isinstance(default, bool):
        legal = tuple(sorted(legal))
    active.seen = [k for k in active.seen if k.name != name] + [Knob(name, default, legal)]
    value = active.overrides.get(name, default)
    return value if value in legal else default


@contextlib.contextmanager
def knob_set(overrides: dict[str, Any] | None = None) -> Iterator[KnobSet]:
    """Record the knobs read inside the block, and apply ``overrides`` to them."""
    ks = KnobSet(dict(overrides or {}))
    token = _ACTIVE.set(ks)
    try:
        yield ks
    finally:
        _ACTIVE.reset(token)


def overridden(name: str) -> bool:
    """Whether the active knob set gives ``name`` a value (a tuner's or a user's choice, which a
    rule then takes as it is)."""
    active = _ACTIVE.get()
    return active is not None and name in active.overrides


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Knobs read inside the block are not recorded: a candidate schedule a rule builds to
    compare with its own and may drop (the overrides still apply to it)."""
    active = _ACTIVE.get()
    saved = list(active.seen) if active is not None else []
    try:
        yield
    finally:
        if active is not None:
            active.seen = saved


def reset_seen() -> None:
    """Forget the knobs read so far (a rule that declined after reading some)."""
    active = _ACTIVE.get()
    if active is not None:
        active.seen = []
