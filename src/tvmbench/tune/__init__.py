"""MetaSchedule tuning into a persistent per-target database that later runs reuse."""

from tvmbench.tune.database import TuningDatabase, default_database_dir
from tvmbench.tune.tuner import TuneConfig, TuneJob, TuneReport, run_tune_job, tune_model

__all__ = ["TuneConfig", "TuneJob", "TuneReport", "run_tune_job", "TuningDatabase", "default_database_dir", "tune_model"]
