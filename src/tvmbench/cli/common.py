"""What every command shares: exit statuses, consoles, writing a document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def make_console(stderr: bool = False, quiet: bool = False) -> Any:
    from tvmbench.results.report import make_console as console

    return console(stderr=stderr, quiet=quiet)


def write_json(path: str | Path, doc: Any) -> Path:
    """Write the document; if that fails after all (a full disk), keep it in the cache folder and
    say where, in one line (exit status 1)."""
    import time

    from tvmbench.errors import WorkFailed
    from tvmbench.files import write_json_atomic
    from tvmbench.paths import cache_dir

    try:
        return write_json_atomic(path, doc)
    except OSError as e:
        kept = write_json_atomic(cache_dir("results") / f"{Path(path).stem}-{time.strftime('%Y%m%d-%H%M%S')}.json",
                                 doc)
        raise WorkFailed(f"cannot write {path} ({e.strerror or e}); the result was kept in {kept}") from None


def check_output(*paths: str | Path | None) -> None:
    """Check every output path given (None or '-' skipped) before any work starts."""
    from tvmbench.files import check_writable

    for p in paths:
        if p and str(p) != "-":
            check_writable(p)


def status_events(status: Any, started: float, log: Any = None, total: int = 0,
                  clock: Any = None) -> Any:
    """An ``on_event(framework, message)`` that shows progress in a rich status line and, with a
    ``log`` console (``--verbose``), also prints each step as its own timestamped line: the
    worker's stages and the compile's (import, passes, kernels, codegen, cache). Counters
    ("timed run 40", "timed run 80") print once, when they start; the status line follows them.

    With ``total`` (framework workers the run will start), the status line counts the workers that
    said ``WORKER_DONE`` and, from their mean time, estimates the time left: a framework costs
    about what the others did (compile and measuring are bounded alike), so the estimate is rough
    but honest from the first finished worker on, and absent before it."""
    import re
    import time

    from tvmbench.measure.runner import WORKER_DONE

    now = clock or time.monotonic
    last: dict[str, str] = {}
    took: list[float] = []  # seconds of each finished worker
    since = [started]  # when the current worker began

    def eta(t: float) -> str:
        if not total or not took:
            return ""
        left = max(0.0, sum(took) / len(took) * (total - len(took)) - (t - since[0]))
        return f"; {len(took)}/{total} done, about {_duration(left)} left"

    def on_event(fw: str, msg: str) -> None:
        t = now()
        elapsed = t - started
        if msg == WORKER_DONE:
            took.append(t - since[0])
            since[0] = t
        if status is not None:
            status.update(f"[bold]{fw}[/bold]: {msg}  [dim]({elapsed:.0f} s{eta(t)})[/dim]")
        shape = re.sub(r"\d+", "#", msg)
        if log is not None and last.get(fw) != shape:
            last[fw] = shape
            log.print(f"[dim]{elapsed:7.1f} s[/dim]  [bold]{fw}[/bold]: {msg}", highlight=False, soft_wrap=True)

    return on_event


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def add_verbose_arg(parser: Any, what: str) -> None:
    parser.add_argument("--verbose", "-v", action="store_true", help=f"print {what} as it happens")
