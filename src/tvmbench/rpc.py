"""Devices behind a TVM RPC tracker: tuning measures candidates on them, and ``run --rpc`` runs
and times the whole compiled model on one of them.

Timing on a remote device uses the device's own clock (the VM's ``time_evaluator`` runs the
calls there and returns their time), never a host clock around a network round trip.
"""

from __future__ import annotations

from typing import Any

from tvmbench.errors import UserError


def parse_tracker(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserError(f"--rpc takes HOST:PORT of a TVM RPC tracker, got '{address}'")
    return host, int(port)


# TVM's tracker protocol (``tvm/rpc/base.py``): a magic number each way, then length-prefixed JSON.
TRACKER_MAGIC, SUMMARY, SUCCESS = 0x2F271, 6, 0


def reach_tracker(host: str, port: int) -> dict[str, Any]:
    """The tracker's summary, or one line saying it cannot be reached (TVM's own server would
    retry a wrong address for ever, silently). Asked over a plain socket in the tracker's own
    protocol, without importing TVM: ``tvmbench rpc server`` checks its tracker before starting
    TVM's server, which imports TVM itself (seconds each, with torch that TVM imports)."""
    import json
    import socket
    import struct

    def receive(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("connection reset")
            data += chunk
        return data

    try:
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            if struct.unpack("<i", receive(sock, 4))[0] != TRACKER_MAGIC:
                raise OSError("not a TVM RPC tracker")
            request = json.dumps([SUMMARY]).encode()
            sock.sendall(struct.pack("<i", len(request)) + request)
            code, summary = json.loads(receive(sock, struct.unpack("<i", receive(sock, 4))[0]))
            if code != SUCCESS:
                raise OSError(f"the tracker answered {code}")
            return summary
    except (OSError, ValueError, TypeError, struct.error) as e:  # (not a tracker's answer: one line too)
        raise UserError(f"cannot reach the TVM RPC tracker at {host}:{port} ({e}); start one with "
                        "'tvmbench rpc tracker'") from None


def check_tracker(host: str, port: int, key: str) -> None:
    """Fail in one line when the tracker is unreachable or has no device under ``key``."""
    summary = reach_tracker(host, port)
    queues = summary.get("queue_info", {})
    if key not in queues:
        raise UserError(f"the tracker at {host}:{port} has no device registered as '{key}' (it has "
                        f"{sorted(queues) or 'none'}); start one with 'tvmbench rpc server --tracker "
                        f"{host}:{port} --key {key}'")


def connect(address: str, key: str, timeout_s: float = 60.0) -> Any:
    """A session on one free device registered under ``key`` (waits up to ``timeout_s`` for one)."""
    from tvm import rpc

    host, port = parse_tracker(address)
    check_tracker(host, port, key)
    try:
        return rpc.connect_tracker(host, port).request(key, priority=1, session_timeout=0,
                                                        max_retry=max(1, int(timeout_s // 5)))
    except Exception as e:
        raise UserError(f"no device under '{key}' at {address} became free ({e}); is every one busy?") from None


def emulator_of(session: Any) -> str | None:
    """The emulator a device server runs under (``tvmbench rpc emulate`` registers
    ``tvmbench.emulated``), else None."""
    try:
        return str(session.get_function("tvmbench.emulated")())
    except Exception:  # a board's server has no such function
        return None


def refuse_emulated(address: str, key: str) -> None:
    """Fail in one line when the device under ``key`` is an emulated one (``tvmbench rpc emulate``):
    its times are an emulator's, and schedules tuned on them would be chosen for qemu. A device
    that cannot be reached now is left for the tuner to wait for."""
    try:
        emulated = emulator_of(connect(address, key, timeout_s=10))
    except UserError:  # busy: nothing to check now
        return
    if emulated is None:
        return
    raise UserError(f"the device under '{key}' at {address} is emulated ({emulated}): its times are an "
                    "emulator's, so tuning on it would choose schedules for qemu; tune on a board, or run "
                    "the build there to check its outputs")
