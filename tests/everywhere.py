"""Every output a number appears in, read the way a user reads it (issue 31: one number everywhere).

``seen(run_dirs, benchmark, out)`` runs, in this process and without Ray, each read command on run
dirs the real driver wrote: ``dateline metrics`` and ``dateline tables`` (their stdout), the report
(``report.md`` and ``report.html``; with several run dirs also ``leaderboard.md``), the MLflow export
read back from a local file store, ``dateline show`` of every episode, ``Results.transcript`` and the
Python API's metrics table. Tests then assert a hand-computed value in each of them, so a number that
is right in one output and wrong in another fails.

``listing(run_dir)`` is every file of a run dir with its size and modification time: reading never
writes, so it is the same before and after ``seen`` (the report and the export write under ``out``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Seen", "seen", "cli", "listing", "mlflow_runs", "rows_with", "cell_lines"]


@dataclass
class Seen:
    metrics: str = ""                  # `dateline metrics RUN BENCH` of the first run dir
    tables: str = ""                   # `dateline tables RUN BENCH` ("" where the benchmark defines none)
    report_md: str = ""
    report_html: str = ""
    leaderboard_md: str = ""           # several run dirs only
    api: list[dict[str, Any]] = field(default_factory=list)      # dateline.results(RUN).metrics().to_pylist()
    mlflow: list[dict[str, Any]] = field(default_factory=list)   # {name, params, metrics, tags} per run
    show: dict[str, str] = field(default_factory=dict)           # episode id -> `dateline show RUN EP`
    transcript: dict[str, str] = field(default_factory=dict)     # episode id -> Results.transcript(EP)
    codes: dict[str, int] = field(default_factory=dict)          # exit status of each CLI command

    def texts(self) -> dict[str, str]:
        """The textual outputs by name (the ones a value is looked for in)."""
        return {"metrics": self.metrics, "tables": self.tables, "report.md": self.report_md,
                "report.html": self.report_html, "leaderboard.md": self.leaderboard_md}


def cli(*argv: str) -> tuple[int, str, str]:
    """``dateline ARGV`` in this process: (exit status, stdout, stderr)."""
    from ray_jobs.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:          # argparse and hydra exit
            code = e.code if isinstance(e.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def seen(run_dirs: list[Path] | Path, benchmark: str, out: Path, *, export: bool = True, show: bool = True,
         n_boot: int = 200, extra: tuple[str, ...] = ()) -> Seen:
    """Every output of ``run_dirs`` (the first one for the single-dir commands) for ``benchmark``.
    ``extra``: flags for ``dateline metrics`` (``--judge J``, ``--score-failures X``)."""
    from dateline import results
    from ray_jobs.outputs.report import build

    dirs = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(d) for d in run_dirs]
    first = str(dirs[0])
    s = Seen()
    s.codes["metrics"], s.metrics, _ = cli("metrics", first, benchmark, *extra)
    s.codes["tables"], s.tables, _ = cli("tables", first, benchmark)
    rep = out / "report"
    build(dirs, rep, n_boot=n_boot)
    s.report_md = (rep / "report.md").read_text()
    s.report_html = (rep / "report.html").read_text()
    if (rep / "leaderboard.md").exists():
        s.leaderboard_md = (rep / "leaderboard.md").read_text()
    r = results(first)
    s.api = r.metrics().to_pylist()
    if show:
        for ep in r.episodes(columns=["episode_id"]).column("episode_id").to_pylist():
            s.codes[f"show {ep}"], s.show[ep], _ = cli("show", first, ep)
            s.transcript[ep] = r.transcript(ep)
    if export:
        uri = (out / "mlruns").resolve().as_uri()
        s.codes["export"], _, _ = cli("export", first, "--to", "mlflow", "--tracking-uri", uri)
        s.mlflow = mlflow_runs(uri)
    return s


def mlflow_runs(uri: str, experiment: str = "dateline") -> list[dict[str, Any]]:
    """The runs of a local MLflow store: name, params, metrics and tags (without MLflow's own)."""
    import mlflow

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=[experiment], output_format="list")
    return [{"name": r.info.run_name, "params": dict(r.data.params), "metrics": dict(r.data.metrics),
             "tags": {k: v for k, v in r.data.tags.items() if not k.startswith("mlflow.")}} for r in runs]


def listing(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``run_dir`` (relative path -> size, mtime in ns), skipping the run lock."""
    found = {}
    for p in sorted(Path(run_dir).rglob("*")):
        if p.is_file() and not p.name.endswith(".lock"):
            st = p.stat()
            found[str(p.relative_to(run_dir))] = (st.st_size, st.st_mtime_ns)
    return found


def rows_with(text: str, *cells: str) -> list[str]:
    """The lines of a Markdown/plain table holding every one of ``cells`` as a whole cell (``|``-split,
    or whitespace-split for the plain tables ``dateline metrics`` prints)."""
    found = []
    for ln in text.splitlines():
        parts = [c.strip() for c in ln.split("|")] if "|" in ln else ln.split()
        if all(c in parts for c in cells):
            found.append(ln)
    return found


def cell_lines(html: str) -> list[str]:
    """An HTML page as text lines, one per table row (cells joined by `` | ``), tags dropped."""
    html = re.sub(r"(?s)<(script|style)\b.*?</\1>", "", html)
    html = re.sub(r"</t[dh]>\s*<t[dh][^>]*>", " | ", html)
    html = re.sub(r"<br\s*/?>|</tr>|</p>|</h\d>|</li>", "\n", html)
    text = re.sub(r"<[^>]+>", "", html)
    import html as _html

    return [ln.strip() for ln in _html.unescape(text).splitlines() if ln.strip()]
