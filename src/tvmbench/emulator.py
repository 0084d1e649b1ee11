"""An aarch64 device server under emulation: a cross-compiled build checked without a device.

``tvmbench rpc emulate --tracker HOST:PORT --key KEY`` registers a TVM RPC device server that
runs aarch64 code under qemu's user-mode emulation (``qemu-aarch64``), so ``run --package`` or
``run --target aarch64 --rpc ...`` can run the aarch64 build and check its outputs against the
reference as on a real board. The device's Python is Debian's aarch64 build (bookworm's 3.11,
unpacked by ``debootstrap --foreign`` into the cache folder: no chroot, and fakeroot for a user
other than root), with the aarch64 wheels of the TVM runtime this machine uses (``pip install
--platform``). The device loads TVM's runtime library only (``TVM_USE_RUNTIME_LIB``) and has no
``ml_dtypes``: under qemu, loading the compiler and ml_dtypes' type tables took 11 of the 16 s
each device process spent importing TVM. Emulated code
runs 100-400x slower than on a board, and not in proportion: the server registers
``tvmbench.emulated`` and results say the times are an emulator's, not a device's speed.

The code TVM generated for aarch64 (tvmbench's schedule rules at NEON's 4 lanes, SVE where the
CPU has it) is then executed, not only compiled: a wrong vector width, a bad remainder loop or an
intrinsic LLVM lowers differently for the target shows up as a failed accuracy check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tvmbench.errors import UserError
from tvmbench.files import write_text_atomic
from tvmbench.paths import cache_dir

SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"  # Debian 12: Python 3.11, as the wheels
PYTHON = "3.11"
PACKAGES = ("python3-minimal", "libpython3.11-stdlib")
# What TVM's RPC server imports besides TVM itself (installed without their dependencies: TVM's
# ml_dtypes is for host-side dtypes, optional, and slow to import under emulation).
WHEELS = ("numpy", "cloudpickle", "psutil", "typing_extensions")
VERSION = "2"  # of the device made: a folder made by an older tvmbench is made again
_SERVER = '''"""tvmbench's emulated device server (written by tvmbench.emulator)."""
import argparse
import tvm
from tvm import rpc

p = argparse.ArgumentParser()
for name in ("host", "tracker", "key", "emulated"):
    p.add_argument("--" + name, required=True)
p.add_argument("--port", type=int, required=True)
args = p.parse_args()
emulated = args.emulated


def mark():
    tvm.register_global_func("tvmbench.emulated", lambda: emulated, override=True)


host, port = args.tracker.rsplit(":", 1)
server = rpc.Server(args.host, args.port, args.port + 100, key=args.key, tracker_addr=(host, int(port)),
                    server_init_callback=mark)
server.proc.join()
'''


def tools() -> tuple[str, str]:
    """Paths of qemu-aarch64 and debootstrap, or one line saying how to install them."""
    qemu = shutil.which("qemu-aarch64")
    deboot = shutil.which("debootstrap") or next((p for p in ("/usr/sbin/debootstrap",) if os.path.exists(p)), None)
    if qemu is None or deboot is None:
        raise UserError("the aarch64 emulator needs qemu-aarch64 and debootstrap: sudo apt-get install qemu-user "
                        "debootstrap (or `make cross`)")
    return qemu, deboot


def device_python(say: Callable[[str], None] = print) -> Path:
    """The emulated aarch64 Python with TVM's runtime (made once into the cache folder, ~600 MB):
    a shell script that starts Debian's aarch64 python3.11 under qemu. Its processes start
    their own children (TVM's server forks a worker with ``sys.executable``), so the script is
    that executable: a host binary that an aarch64 Python can exec without binfmt_misc."""
    import filelock

    qemu, deboot = tools()
    home = cache_dir("emulator") / "aarch64"
    root, site, script = home / "root", home / "site", home / "root" / "usr" / "bin" / "python-emu"
    with filelock.FileLock(str(home.parent / "aarch64.lock")):  # (another process may be making it)
        ready = home / "ready"
        if not ready.exists() or ready.read_text() != VERSION:
            _make(home, root, site, script, qemu, deboot, say)
    return script


def _make(home: Path, root: Path, site: Path, script: Path, qemu: str, deboot: str, say: Callable[[str], None]) -> None:
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    say(f"making the aarch64 device's Python under {home} (once; Debian {SUITE} packages and the TVM wheels)")
    _run([*_as_root(), deboot, "--arch=arm64", "--foreign", "--variant=minbase", f"--include={','.join(PACKAGES)}",
          SUITE, str(root), MIRROR], "debootstrap")
    for deb in sorted((root / "var" / "cache" / "apt" / "archives").glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(root)], f"unpacking {deb.name}")
    _run([sys.executable, "-m", "pip", "install", "-q", "--target", str(site), "--only-binary=:all:", "--no-deps",
          "--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64", "--python-version",
          PYTHON, "--implementation", "cp", *_tvm_pins(), *WHEELS], "pip install (aarch64 wheels)")
    script.write_text(f'#!/bin/sh\nexport PYTHONPATH="{site}" TVM_USE_RUNTIME_LIB=1\n'
                      f'exec "{qemu}" -L "{root}" -0 "{script}" "{root}/usr/bin/python{PYTHON}" "$@"\n')
    script.chmod(0o755)
    write_text_atomic(home / "server.py", _SERVER)
    write_text_atomic(home / "ready", VERSION)  # (last: an interrupted make starts again)


def _as_root() -> list[str]:
    """What debootstrap, which refuses to run as another user, is started under: nothing for root,
    fakeroot for anyone else (the packages are only downloaded and unpacked, nothing installed)."""
    if os.geteuid() == 0:
        return []
    if shutil.which("fakeroot") is None:
        raise UserError("making the emulated device's Python needs root or fakeroot (debootstrap refuses other "
                        "users): sudo apt-get install fakeroot, or run this command once with sudo")
    return ["fakeroot"]


def _tvm_pins() -> list[str]:
    """The host's TVM and tvm-ffi versions: the device runs the runtime the build was made for."""
    from importlib.metadata import version

    return [f"apache-tvm=={version('apache-tvm')}", f"apache-tvm-ffi=={version('apache-tvm-ffi')}"]


def _run(cmd: list[str], what: str) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"making the aarch64 emulator failed at {what}: {tail[0]}")


def server_command(tracker: str, key: str, host: str = "127.0.0.1", port: int = 9090,
                   say: Callable[[str], None] = print) -> list[str]:
    """The command that runs an emulated aarch64 device server registered under ``key``."""
    python = device_python(say)
    qemu = subprocess.run([tools()[0], "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    return [str(python), str(python.parents[3] / "server.py"), "--host", host, "--port", str(port),
            "--tracker", tracker, "--key", key, "--emulated", qemu.strip() or "qemu-aarch64"]
