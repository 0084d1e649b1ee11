"""A TVM RPC tracker and device servers on 127.0.0.1, started with tvmbench's own commands."""

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_devices(key: str = "loop", servers: int = 1, emulated: bool = False) -> Iterator[int]:
    """Yields the tracker's port once ``servers`` device servers are registered under ``key``
    (``emulated``: aarch64 devices under qemu, ``tvmbench rpc emulate``); stops them all afterwards."""
    from tvm import rpc

    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-m", "tvmbench.cli", "rpc", "tracker", "--host", "127.0.0.1",
                               "--port", str(port)], start_new_session=True)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # (a socket: TVM's connect_tracker retries every 5 s)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        if emulated:  # (the first start makes the emulated device's Python: a minute more)
            deadline = time.monotonic() + 600
        for _ in range(servers):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "tvmbench.cli", "rpc", "emulate" if emulated else "server",
                 "--tracker", f"127.0.0.1:{port}",
                 "--key", key, "--host", "127.0.0.1", "--port", str(free_port())], start_new_session=True))
        while time.monotonic() < deadline:
            if servers == 0:
                break
            queue = rpc.connect_tracker("127.0.0.1", port).summary()["queue_info"].get(key, {})
            if queue.get("free", 0) >= servers:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the {servers} device servers did not register with the tracker")
        yield port
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
