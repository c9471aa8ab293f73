"""The jobs and their drivers, grouped by what a user does. Each package's docstring says what it
owns and whom it may import; ``tests/test_boundaries.py`` checks the rules:

``cli/``      what the user types; nothing imports it
``config/``   composing configurations, and the harness every Hydra command runs under
``cluster/``  Ray, model pools, sizing, signals, the machine doctor: knows no job
``budget/``   the driver side of run budgets
``judging/``  judge calls, the judge stream and actors, the ``pairwise`` job
``run/``      ``dateline run`` and ``dateline estimate``: evaluation
``build/``    ``dateline build``: jobs that make benchmark data (``build -> run`` only)
``outputs/``  reading run dirs: metrics, tables, report, exports, race-replay; starts nothing

``run`` and ``build`` may use ``judging``, ``budget``, ``cluster`` and ``config``.
"""
