"""The command line, a thin layer over the Python API (``tvmbench.api``).

``run`` (one model, several frameworks), ``compare`` (models x shapes x frameworks, summarised),
``export`` (a built package), ``profile`` (per-kernel times), ``tune`` (MetaSchedule into a
database), ``db`` (inspect and manage databases), ``rpc`` (a tracker or device server),
``ops`` (the operator lab's store), ``explain`` (TVM against a peer, operator kind by kind),
``history`` and ``diff`` (past results, regressions), ``models``, ``frameworks``, ``target`` and
``doctor``. One module per group of commands, each
with its parsers beside its command functions; shared argument groups in ``args``.

User mistakes (unknown model, bad target, bad shape flag, missing framework) end with one line on
stderr and exit status 2, never a traceback. A framework that fails during a run is recorded in
the result and the other frameworks' numbers are still printed and written. Building the parser
imports neither torch nor TVM: ``tvmbench --help`` answers at once.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from tvmbench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from tvmbench.errors import UserError, WorkFailed

__all__ = ["EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """A usage error is the short usage line and the error, not the whole option list (which
    ``--help`` prints); subcommand parsers inherit this class."""

    def error(self, message: str) -> Any:
        self.exit(EXIT_USAGE, f"usage: {self.prog} [options]   ({self.prog} --help lists them)\n"
                              f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from tvmbench.cli.compare import add_compare_parser
    from tvmbench.cli.explain import add_explain_parser
    from tvmbench.cli.history import add_history_parsers
    from tvmbench.cli.info import add_info_parsers
    from tvmbench.cli.ops import add_ops_parser
    from tvmbench.cli.profile import add_profile_parser
    from tvmbench.cli.run import add_export_parser, add_run_parser
    from tvmbench.cli.tune import add_db_parser, add_rpc_parser, add_tune_parser
    from tvmbench.version import __version__

    parser = _Parser(
        prog="tvmbench", description="Compile, benchmark and compare deep-learning models with Apache TVM.")
    parser.add_argument("--version", action="version", version=f"tvmbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_run_parser, add_export_parser, add_profile_parser, add_compare_parser, add_tune_parser,
                add_db_parser, add_rpc_parser, add_ops_parser, add_explain_parser, add_history_parsers,
                add_info_parsers):
        add(sub)
    return parser


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    # A SIGTERM (kill, a CI timeout) unwinds like Ctrl-C, so worker processes are killed too and
    # never outlive tvmbench.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["tune", "report"]:  # Bennu's name for the per-layer table of two databases
        argv = ["db", "compare", *argv[2:]]
    args = build_parser().parse_args(argv)
    try:
        code = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not as an "Exception ignored" at exit
        return code
    except UserError as e:
        print(f"tvmbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except WorkFailed as e:
        print(f"tvmbench: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:  # the reader went away (``tvmbench history --csv | head``): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_OK
    except KeyboardInterrupt:
        tuning = args.command == "tune" or getattr(args, "tune", False) or getattr(args, "trials", None)
        print("tvmbench: interrupted" + (" (a tuning database keeps every batch measured so far)" if tuning else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
