"""What runs episodes: the episode worker actors (``dispatch``), actor helpers (``actors``),
benchmark services episodes call (``services``), the background store writer (``writer``), the
progress line (``progress``) and the run-dir lock (``runlock``)."""
