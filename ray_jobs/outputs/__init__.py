"""Reading run dirs: the ``metrics``, ``tables``, ``show`` and ``repair`` commands, the HTML/Markdown
report (``report/``), the exports to MLflow, W&B and inspect_ai's log format, and race-replay.

Outputs start nothing: no Ray, no ``Session``, no job (``tests/test_boundaries.py``). They import
``engine`` only.
"""
