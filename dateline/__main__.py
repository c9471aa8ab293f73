"""``python -m dateline ...``: the same as the ``dateline`` command."""

from dateline import main

raise SystemExit(main())
