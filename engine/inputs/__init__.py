"""What comes in: data files read line by line with every failure named (``jsonl``), folder trees
walked through descriptors (``fdtree``), bad rows set aside or refused (``quarantine``), hub ids
resolved in the local cache (``hub``), and paths relative to the repository (``paths``)."""
