import os

import pytest


# Tests never write into the user's ~/.cache: one cache folder per test session.
@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    os.environ["TVMBENCH_CACHE"] = str(tmp_path_factory.mktemp("tvmbench-cache"))
    os.environ.setdefault("TVM_NUM_THREADS", "2")
    yield


def _kill_group(proc, timeout: float = 30.0) -> None:
    """SIGKILL a process group (a tvmbench process started with ``start_new_session=True`` and
    its workers) and wait until none of them is left: the kill reaches each process when it is
    next scheduled, so a worker on the other core can finish a write after the leader is reaped."""
    import signal
    import time

    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # all gone already
        pass
    proc.wait()  # the leader, reaped: a zombie would still count as the group's
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"processes of group {pgid} still alive {timeout} s after SIGKILL")


@pytest.fixture
def kill_group():
    return _kill_group
