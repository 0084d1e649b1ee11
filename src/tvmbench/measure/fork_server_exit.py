"""Imported last into the fork server (see ``isolation.context``): the server leaves at once when
tvmbench has gone.

The server learns that tvmbench has exited from the end of file on its pipe, and then leaves like
any Python program: its exit handlers and the finalizers of torch, torchvision and TVM took
0.96 s of a core after tvmbench itself had gone (measured on the 2-core Zen 1 host). A run started
right after another (the A/A benchmark, a shell loop, a CI job) found the machine 48-51 % busy
with it and warned. The server has nothing to save (workers are its forks, and they leave by
``os._exit`` already), so an exit handler registered after the preloaded libraries', which runs
first, ends it at once. Imported anywhere but the fork server, this module does nothing.
"""

from __future__ import annotations

import atexit
import os
import sys


def _in_fork_server() -> bool:
    """Whether this import runs inside ``multiprocessing.forkserver.main``'s preloading."""
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name == "main" and frame.f_globals.get("__name__") == "multiprocessing.forkserver":
            return True
        frame = frame.f_back
    return False


def _leave_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(0)


if _in_fork_server():
    atexit.register(_leave_now)
