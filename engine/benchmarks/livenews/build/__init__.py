"""``dateline build build=livenews``: fresh livenews questions from dated articles, as LiveNewsBench
built its data (the paper's section 2). Intake (articles, events, outlets), the model stages
(``stages``, ``prompts/``), the builder (``builder``), deduplication, the date split, the human
review, and the release (``publish``)."""
