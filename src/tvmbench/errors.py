"""User-facing errors.

Anything raised as a :class:`UserError` is a mistake the user can fix (unknown model, bad target,
bad shape flag, missing optional framework). The CLI prints its message as one line on stderr and
exits with status 2, without a traceback. Everything else is a bug or a framework failure and is
reported as such.
"""

from __future__ import annotations

from collections.abc import Sequence


class UserError(Exception):
    """A problem with the user's input; the message says what was wrong and what to do."""


class MissingFrameworkError(UserError):
    """An optional framework is not installed."""

    def __init__(self, framework: str, package: str, extra: str | None = None) -> None:
        hint = f"pip install 'tvmbench[{extra}]'" if extra else f"pip install {package}"
        super().__init__(f"framework '{framework}' needs the package '{package}', which is not installed: {hint}")
        self.framework = framework


class FrameworkUnavailableError(UserError):
    """A framework is installed but cannot run here (e.g. TensorRT without an NVIDIA GPU)."""


class UnsupportedOperatorError(UserError):
    """The Relax importer cannot convert an operator of the model."""


def headline(e: BaseException, limit: int = 300) -> str:
    """The line of a framework's (often very long) error message that says what broke.

    Usually the first line; but OpenVINO and TVM start with a source location alone
    ("Exception from src/inference/src/cpp/core.cpp:117:"), which says nothing to a user, so
    lines that are only a location are skipped.
    """
    import re

    for line in str(e).strip().splitlines():
        line = line.strip()
        if line and not re.fullmatch(r"(Exception from )?[\w./-]+\.(cc|cpp|h|hpp|py):\d+:?", line):
            return line[:limit]
    return type(e).__name__


class WorkFailed(Exception):
    """The work itself failed (a crash inside TVM or a framework, a timeout), not the user's
    input: one line, exit status 1."""


class TuningFailed(WorkFailed):
    """Tuning crashed inside TVM (not a user mistake): exit status 1; the database keeps every
    batch measured so far."""


def check_numbers(minimum: int = 1, times: Sequence[str] = (), **values: float | None) -> None:
    """The API's counterpart of the command line's argument types (which check the flags before
    this sees them): a count below ``minimum``, or a time (named in ``times``) not above 0, is one
    line naming the keyword, not a worker that measures nothing. None: not given."""
    for name, value in values.items():
        if value is None:
            continue
        flag = f"{name}={value!r}:"
        if name in times and not value > 0:
            raise UserError(f"{flag} must be above 0")
        if name not in times and (value < minimum or value != int(value)):
            raise UserError(f"{flag} must be a whole number of at least {minimum}")
