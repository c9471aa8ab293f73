"""Scoring: who judged what (``judges``), a run dir's configurations and their outcomes over
their plans (``outcomes``), the metric table every output reads (``metric_table``), the
statistics behind intervals and tests (``stats``), and pairwise comparisons (``pairwise``)."""
