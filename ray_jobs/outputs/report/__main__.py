"""``python -m ray_jobs.report PATH...``: the same as ``dateline report PATH...``."""

import sys

from ray_jobs.report import main

raise SystemExit(main(sys.argv[1:]))
