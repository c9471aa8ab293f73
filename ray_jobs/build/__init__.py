"""``dateline build``: jobs whose episodes make benchmark data (drafted by a model, checked by a
second one, published in the benchmark's own layout). A build reuses the run's stages, hosting and
judging: ``build -> run`` is the one edge between two jobs (``tests/test_boundaries.py``).

Today it holds the analyst checklist builder (``checklists``), the first such pipeline.
"""
