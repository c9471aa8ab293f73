"""Judging: judge calls and the stream that feeds stored rows to them (``stream``), the judge actors
behind it (``fleet``), and the ``dateline pairwise`` job (``pairwise``).

Used by ``run`` and ``build``; it imports ``budget``, ``cluster``, ``config`` and ``engine``, never
another job or ``outputs``.
"""
