"""What comes in: data files read line by line with every failure named (``jsonl``), folder trees
walked through descriptors (``fdtree``), bad rows set aside or refused (``quarantine``), hub ids
resolved in the local cache (``hub``), paths relative to the repository (``paths``), and where
this process's cgroups are, from ``/proc`` (``procfs``)."""
