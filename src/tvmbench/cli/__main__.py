"""``python -m tvmbench.cli ...`` (what the benchmarks' scripts call)."""

import sys

from tvmbench.cli import main

sys.exit(main())
