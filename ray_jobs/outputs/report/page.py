"""The report page: Markdown and HTML assembled side by side, figures saved as PNG next to them
and embedded in the HTML, tables sortable, searchable and filterable in a browser (``tables``),
and the number formats every section uses (``num``, the precision, lives in ``sections``: the
leaderboard ranks by it)."""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.scoring import outcomes, stats
from ray_jobs.outputs.report import tables
from ray_jobs.outputs.report.sections import num

if TYPE_CHECKING:
    from matplotlib.figure import Figure

@dataclass(frozen=True)
class Link:
    """A table cell that links to another page of the report (relative ``href``)."""
    text: str
    href: str

    def __str__(self) -> str:
        return self.text


Cell = str | int | float | Link


@dataclass
class Page:
    out: Path
    md: list[str] = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    figures: int = 0

    def heading(self, text: str, level: int = 2) -> None:
        self.md.append(f"{'#' * level} {text}\n")
        self.html.append(f"<h{level}>{html.escape(text)}</h{level}>")

    def para(self, text: str) -> None:
        self.md.append(text + "\n")
        self.html.append(f"<p>{html.escape(text)}</p>")

    def strong(self, text: str) -> None:
        """A paragraph in bold (warnings a reader must not miss, e.g. self-judged numbers)."""
        self.md.append(f"**{text}**\n")
        self.html.append(f"<p><b>{html.escape(text)}</b></p>")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
        md = [[f"[{c.text}]({c.href})" if isinstance(c, Link) else str(c) for c in r] for r in rows]
        self.md.append("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
                       + "".join("| " + " | ".join(r) + " |\n" for r in md))
        self.html.append(_table(header, [[_link_td(c) if isinstance(c, Link) else _td(str(c)) for c in r]
                                         for r in rows]))

    def markdown_table(self, md: str) -> None:
        """A table a benchmark wrote as Markdown (its paper layout), as is and as HTML."""
        self.md.append(md + "\n")
        self.html.append(md_table_html(md))

    def figure(self, fig: Figure, name: str, caption: str) -> None:
        import matplotlib.pyplot as plt

        self.figures += 1
        fname = f"fig{self.figures:02d}-{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.png"
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        data = buf.getvalue()
        (self.out / fname).write_bytes(data)
        self.md.append(f"![{caption}]({fname})\n\n*{caption}*\n")
        self.html.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,'
                         f'{base64.b64encode(data).decode()}"><figcaption>{html.escape(caption)}</figcaption></figure>')

    def write(self, title: str) -> Path:
        return self.write_named("report", title)

    def write_named(self, name: str, title: str) -> Path:
        """``<name>.md`` and ``<name>.html`` in the output folder; the HTML's path."""
        (self.out / f"{name}.md").write_text(f"# {title}\n\n" + "\n".join(self.md))
        page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body{{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}}
h1{{border-bottom:2px solid #333}} h2{{margin-top:2em;border-bottom:1px solid #ccc}} h3{{margin-top:1.4em}}
table{{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.86em}}
th,td{{border:1px solid #ccc;padding:.25em .55em;text-align:left;vertical-align:top}} th{{background:#f3f3f3}}
tr:nth-child(even) td{{background:#fafafa}} figure{{margin:1em 0}} img{{max-width:100%}}
figcaption{{font-size:.85em;color:#555}} p{{max-width:60em}} td.incomplete{{background:#fde2e1 !important;color:#8a1c14}}
{tables.CSS}
</style></head><body><h1>{html.escape(title)}</h1>
{chr(10).join(self.html)}
{tables.script() if any("<thead>" in h for h in self.html) else ""}
</body></html>"""
        path = self.out / f"{name}.html"
        path.write_text(page)
        return path


def md_table_html(md: str) -> str:
    lines = [ln for ln in md.strip().splitlines() if ln.startswith("|")]
    if len(lines) < 2:
        return f"<pre>{html.escape(md)}</pre>"
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    head, body = cells[0], cells[2:]
    return _table(head, [[_td(c) for c in r] for r in body])


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table of header names and rows of ready cells (``<td>...</td>``). Its ``<thead>`` is what
    makes it sortable, searchable and filterable in a browser (``tables.script``)."""
    return ("<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr></thead><tbody>"
            + "".join("<tr>" + "".join(r) + "</tr>" for r in rows) + "</tbody></table>")


def _link_td(c: Link) -> str:
    return f'<td><a href="{html.escape(c.href)}">{html.escape(c.text)}</a></td>'


def _td(text: str) -> str:
    """A cell; one that says a configuration is INCOMPLETE is marked so a reader cannot miss it."""
    if "INCOMPLETE" in text:
        return f'<td class="incomplete"><b>{html.escape(text)}</b></td>'
    return f"<td>{html.escape(text)}</td>"


def est(e: stats.Estimate) -> str:
    """``0.000 [0.000, 0.168] (n=20, exact)``; ``0.512 [0.40, 0.61] (n=30, bootstrap)``; with too few
    tasks for an interval (stats.interval), no interval and it says so: ``1 (n=2; too few tasks for an
    interval)``; a configuration a race stopped: its decision interval or SCREENING (race_cell)."""
    raced = outcomes.race_cell(e.value, e.lo, e.hi, e.method, e.n, num)
    if raced is not None:
        return raced
    if math.isnan(e.value):
        return "n/a"
    return f"{num(e.value)}{ci(e.lo, e.hi, e.method, e.n)}"


def ci(lo: float | None, hi: float | None, method: str, n: int) -> str:
    """The interval and count after a value (see :func:`est`); also for the paired differences and
    the metrics table's ``lo``/``hi``/``interval`` columns, so every output writes it alike."""
    if method == stats.TOO_FEW or lo is None or hi is None or math.isnan(lo):
        return f" (n={n}; too few tasks for an interval)" if method == stats.TOO_FEW else f" (n={n})"
    return f" [{num(lo)}, {num(hi)}] (n={n}, {method})"
