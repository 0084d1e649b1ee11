"""MetaSchedule's worker process (``tvm.exec.popen_worker``) without torch.

``tvm_ffi`` imports torch when it is installed (for DLPack exchange), so every worker TVM's
process pools start (MetaSchedule's builder starts them afresh for every batch of candidates,
its runner once) spent 4.5 of its 6.8 s start-up importing torch on a Zen 3 host. Building and
running a scheduled kernel never touches torch, so this worker hides it before importing TVM:
``import torch`` fails there, as if torch were not installed, and ``tvm_ffi`` goes on without it.
``tuning/build.py`` (``light_workers``) makes the pools start this module instead.
"""

import sys

sys.modules["torch"] = None  # type: ignore[assignment]  # "import torch" raises ImportError

from tvm.exec.popen_worker import main  # noqa: E402

if __name__ == "__main__":
    main()
