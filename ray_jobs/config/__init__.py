"""Composing configurations: the Hydra schema registered once, ``compose`` and ``compose_pairwise``
(used by the jobs, the tests and the Python API), and the job harness ``harness.hydra_main`` that
every Hydra command runs under.

It imports only ``engine``, except the harness, which builds the jobs' ``cluster.session.Session``.
"""
