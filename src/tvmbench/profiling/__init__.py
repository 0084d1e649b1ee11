"""Where TVM's time goes: per-kernel times of the compiled model, their FLOPs, GFLOP/s and share
of the machine's peak, and which schedule each ran (tuning record or tvmbench's default)."""

from tvmbench.profiling.kernels import KernelProfile, ModelProfile, compare_profiles, profile_job

__all__ = ["KernelProfile", "ModelProfile", "compare_profiles", "profile_job"]
