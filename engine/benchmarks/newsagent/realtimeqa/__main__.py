"""``python -m engine.benchmarks.newsagent.realtimeqa SRC OUT ...``: the converter's command line."""

import sys

from engine.benchmarks.newsagent.realtimeqa import main

sys.exit(main())
