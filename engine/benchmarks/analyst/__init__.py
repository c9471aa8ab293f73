"""analyst (AnalystBench): long-form reports from source documents, vanilla (chunked map-reduce)
or agentic (a tool loop in a sandboxed working directory), scored by checklists, claim
groundedness and figure coverage. Work in progress (issue 4): no ``BENCHMARK`` yet, so the
runtime does not offer it."""
