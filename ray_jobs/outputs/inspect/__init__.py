"""``dateline export --to inspect RUN_DIR``: a run dir as inspect_ai eval logs (``plain``)."""

from ray_jobs.outputs.inspect.plain import (
    FOLDER,
    log_name,
    messages,
    metric_views,
    results,
    sample_metadata,
    score_name,
    scores,
    usage,
    verdicts,
    views,
    write_logs,
)

__all__ = ["FOLDER", "log_name", "messages", "metric_views", "results", "sample_metadata", "score_name", "scores",
           "usage", "verdicts", "views", "write_logs"]
