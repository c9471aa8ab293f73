"""``python -m ray_jobs.run [overrides]``: the same as ``dateline run``."""

from ray_jobs.run.entry import hydra_entry

hydra_entry()
