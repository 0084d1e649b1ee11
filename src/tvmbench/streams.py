"""The process's standard streams, silenced for code that writes to them from C++."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def silenced(stdout: bool = True, stderr: bool = True) -> Iterator[None]:
    """Point the process-level stdout/stderr at /dev/null for a while.

    Exporters and compilers write from C++ or through their own handlers (the TorchScript
    exporter dumps whole graphs when it gives up, MetaSchedule prints a table per batch), which
    ``contextlib.redirect_stdout`` cannot catch; their failures still arrive as exceptions.
    """
    fds = [fd for fd, on in ((1, stdout), (2, stderr)) if on]
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in fds]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in fds:
            os.dup2(devnull, fd)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, copy in zip(fds, saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)
