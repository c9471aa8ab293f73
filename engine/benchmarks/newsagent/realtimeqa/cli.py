"""The converter's command line: its options (shared with ``dateline convert-realtimeqa``, whose
subparser takes them from :func:`add_arguments`), ``python -m engine.benchmarks.newsagent.realtimeqa``,
and :func:`run`, which turns bad data into one line on stderr and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.benchmarks.newsagent.realtimeqa.conversion import convert
from engine.errors import DataError
from engine.inputs.quarantine import ON_BAD_ROWS
from engine.runtime.logs import configure as configure_logging


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The converter's options (``dateline convert-realtimeqa``'s subparser, and :func:`main`)."""
    p.add_argument("src", type=Path, help="folder with YYYYMMDD_qa.jsonl.gz / YYYYMMDD_gcs.jsonl.gz pairs (RealTime "
                                          "QA's weekly dumps: github.com/realtimeqa/realtimeqa_public, past/)")
    p.add_argument("out", type=Path, help="output dataset folder (objects.jsonl, tasks.jsonl)")
    p.add_argument("--max-sentences", type=int, default=40, help="sentences kept per article (default 40)")
    p.add_argument("--threshold", type=float, default=0.6, help="token containment for a match (default 0.6)")
    p.add_argument("--weeks", default=None, help="comma-separated YYYYMMDD weeks (default: all)")
    p.add_argument("--on-bad-rows", choices=ON_BAD_ROWS, default="error",
                   help="error: stop at the first bad row (default); skip: leave bad rows out and list them "
                        "in OUT/quarantine.parquet")


DESCRIPTION = "Convert a RealTime QA dump into a newsagent dataset folder."


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.benchmarks.newsagent.realtimeqa", description=DESCRIPTION)
    add_arguments(p)
    return run(p.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Convert; bad data is one line on stderr and exit status 2."""
    configure_logging()
    weeks = [w.strip() for w in args.weeks.split(",") if w.strip()] if args.weeks else None
    try:
        stats = convert(args.src, args.out, args.max_sentences, args.threshold, weeks, on_bad_rows=args.on_bad_rows)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=2, sort_keys=True))
    return 0
