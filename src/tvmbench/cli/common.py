"""What every command shares: exit statuses, consoles, writing a document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def make_console(stderr: bool = False, quiet: bool = False) -> Any:
    from tvmbench.results.report import make_console as console

    return console(stderr=stderr, quiet=quiet)


def write_json(path: str | Path, doc: Any) -> Path:
    from tvmbench.files import write_json_atomic

    return write_json_atomic(path, doc)


def status_events(status: Any, started: float) -> Any:
    """An ``on_event(framework, message)`` that shows progress in a rich status line."""
    import time

    def on_event(fw: str, msg: str) -> None:
        status.update(f"[bold]{fw}[/bold]: {msg}  [dim]({time.monotonic() - started:.0f} s)[/dim]")

    return on_event
