"""The driver side of ``run.budget``: spend recorded in a run dir, the per-run budget and its
ledger actor, the sweep-wide ledger, and the gates that stop a configuration or a judge.

Used by ``run``, ``judging`` and ``build``; it imports ``cluster`` (pool uptime) and ``engine`` only.
"""
