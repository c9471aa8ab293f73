"""``python -m ray_jobs.cli ...``: the same as ``dateline ...``."""

import sys

from ray_jobs.cli.main import main

raise SystemExit(main(sys.argv[1:]))
