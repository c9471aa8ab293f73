"""``dateline export --to inspect RUN_DIR``: a run dir as inspect_ai eval logs, for ``inspect view``.

One log per configuration (``<benchmark>_<config hash>.eval``), written with inspect_ai's own types
and writer (``EvalLog``, ``write_eval_log``), so whatever reads inspect logs reads it: ``inspect view``,
``read_eval_log``, inspect's dataframes. Each episode is one sample:

* ``id`` its task id and ``epoch`` its seed's rank in the configuration (1, 2...), ``uuid`` its episode id;
* ``messages``: every model call of the episode turn by turn, as ``dateline show`` prints them: each
  call's prompt messages that the conversation does not hold yet, then the completion as the
  assistant's message; the environment steps the completion led to (``steps``: its parsed action,
  its result) are ``ToolCall``\\ s on that message, each answered by a ``ChatMessageTool`` holding the
  step's result (a failed step: its ``error``; an action that did not parse: ``parse_error``).
  The prompt messages keep the role the model saw them with (an observation is a user message),
  so the messages less the tool results are the stored conversation. Steps without a model call
  (the rule-based baseline) are assistant turns of their own; ``input`` is what the first call's
  prompt asks (its system message is the agent's, as a solver's would be);
* ``output``: the episode's final output (its ``output`` column), ``target`` the reference the
  benchmark compares it with;
* ``scores``: the per-episode metric values ``dateline show`` and the report print
  (``ray_jobs.outputs.report.episodes``: the code ``dateline metrics`` averages), one dict-valued score,
  ``metrics (judge <id>)`` for each judge that judged the episode (a judge's view holds every value
  of the unjudged one), else ``metrics``; and each judge verdict as ``<key> (judge <id>)``: the
  parsed value, the judge's own text as its ``explanation``, the final output as its ``answer`` (a
  verdict that did not parse is unscored, reason ``grader_failed``);
* ``error``: an ``EvalError`` for an episode without a result (its status and stored error's first
  line; the whole error as the traceback). It has no scores: it counts by its plan's failure policy,
  which the results (the metrics table) apply;
* ``model_usage``: the episode's tokens under its model and its judges' under theirs;
* ``metadata``: where it comes from: episode and task id, seed, configuration, benchmark, model,
  status, worker, replica, engine identity, the dateline version that exported it.

The log's results are the configuration's rows of the metrics table (``engine/scoring/metric_table.py``,
as ``ray_jobs/outputs/export.py`` reads them for MLflow and W&B): one ``EvalScore`` per judge (``metrics``
or ``metrics (judge <id>)``, and ``..., common tasks`` for the comparison scope), each metric with
its ``n``, interval and how the interval was made in its metadata; the counts, marks and adaptive
decision in the results' metadata. Its spec carries the model, the agent settings (solver args),
the benchmark settings (task args), the run's provenance (``provenance-*.json``: commit, packages)
and ``viewer.trust_content=False``: the transcripts hold model output and fetched web text, shown
as plain text. Exporting again rewrites the same files. A run dir on an object store gets its logs
under ``RUN_DIR/_inspect/`` too (written locally, then uploaded). ``inspect view start --log-dir
RUN_DIR/_inspect`` shows them; a sample's page is ``#/logs/<log>/samples/sample/<task id>/<epoch>/``.

``plain`` reads each episode as plain data (no inspect_ai needed); ``log`` builds inspect's types
from it and writes the logs. inspect_ai is an optional extra (``pip install dateline[export]``):
``log`` alone imports it, when a log is built, as ``export.py`` imports mlflow and wandb.
"""

from ray_jobs.outputs.inspect.log import load_inspect_ai, write_logs
from ray_jobs.outputs.inspect.plain import (
    FOLDER,
    log_name,
    marks,
    messages,
    metric_views,
    results,
    run_provenance,
    sample_metadata,
    score_name,
    scores,
    total_usage,
    usage,
    verdicts,
    views,
)

__all__ = ["FOLDER", "load_inspect_ai", "log_name", "marks", "messages", "metric_views", "results", "run_provenance",
           "sample_metadata", "score_name", "scores", "total_usage", "usage", "verdicts", "views", "write_logs"]
