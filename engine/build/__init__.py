"""Builds: LLM pipelines that make benchmark data, run by the run machinery (``dateline build``).

A benchmark may offer builders (``BenchmarkBase.builders``: name -> :class:`Builder`). A build is a
run whose episodes make data: :class:`~engine.build.adapter.BuildBenchmark` exposes a builder to the
driver as a benchmark named ``<benchmark>:<builder>`` (``engine.benchmarks.get_benchmark`` resolves
the ref), so drafting runs on the episode workers and the checks run as judge rounds on the
verifier (``judge=hosted_model`` or an endpoint); ``ray_jobs/build`` publishes what passed.

* :mod:`engine.build.protocol`: the contract (:class:`Builder`, :class:`Verdict`, stage keys);
* :mod:`engine.build.adapter`: the builder as a benchmark;
* :mod:`engine.build.memo`: stage calls inside a draft, keyed by content, so a killed or re-versioned
  build never repeats a stored call;
* :mod:`engine.build.release`: a release folder (exclusive create), its stage records and manifest.

``engine/build`` imports the protocol, storage and scoring only, never a benchmark.
"""
