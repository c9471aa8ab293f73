"""What the user types: ``dateline COMMAND ...``. The parser, the dispatch to each command, the
``--help`` text of the Hydra commands, the did-you-mean checks of overrides, and the one place where
errors become exit statuses.

It may import every other package of ``ray_jobs`` (lazily, per command, so that ``dateline`` starts
quickly); nothing imports it (``tests/test_boundaries.py``).

The entry point is ``ray_jobs.cli.main:main`` (``python -m ray_jobs.cli`` runs it too). This file
imports nothing, so that ``from ray_jobs.cli import main`` is the module, never a function that
shadows it.
"""
