"""``python -m ray_jobs.outputs.report PATH...``: the same as ``dateline report PATH...``."""

import sys

from ray_jobs.outputs.report import main

raise SystemExit(main(sys.argv[1:]))
