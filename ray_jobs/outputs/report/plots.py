"""The report's figures (matplotlib, Agg), drawn from the sections' data: tokens and cost per
configuration, a benchmark's curve and per-task bars, and a pairwise win-rate heatmap and
dimension-wise shares."""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from ray_jobs.outputs.report.compute_pairwise import Dimensions, Ratings
from ray_jobs.outputs.report.sections import Curve, PerTask, TokensChart

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _agg() -> None:
    """Draw off-screen (matplotlib is imported only when a figure is drawn)."""
    import matplotlib

    matplotlib.use("Agg")


def plot_names(names: list[str]) -> list[str]:
    """Shorter names for plot axes and legends: when every system is the same model, the settings
    alone (``guided_json=True``) tell them apart; tables keep the full labels."""
    models = {n.split(" (", 1)[0] for n in names if " (" in n and not n.startswith("reference")}
    if len(models) != 1:
        return names
    m = models.pop()
    return [n[len(m) + 2:-1] if n.startswith(f"{m} (") and n.endswith(")") else n for n in names]


def short(s: str, n: int = 38) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def tokens_figure(chart: TokensChart) -> Figure:
    _agg()
    import matplotlib.pyplot as plt

    priced = bool(chart.cost)
    fig, axes = plt.subplots(1, 2 if priced else 1, figsize=(12 if priced else 8, 0.8 + 0.45 * len(chart.labels)),
                             squeeze=False)
    ax = axes[0, 0]
    names = plot_names(chart.labels)
    ax.boxplot(chart.tokens, orientation="horizontal", tick_labels=[short(x, 45) for x in names])
    ax.set_xlabel("tokens per episode (prompt + completion)")
    ax.grid(axis="x", alpha=.3)
    if priced:
        ax2 = axes[0, 1]
        es = [e for _, e in chart.cost]
        y = np.arange(len(es))
        err = np.array([[max(0.0, e.value - e.lo) if not math.isnan(e.lo) else 0 for e in es],
                        [max(0.0, e.hi - e.value) if not math.isnan(e.hi) else 0 for e in es]])
        ax2.barh(y, [e.value for e in es], xerr=err, capsize=3, color="#2b6cb0")
        ax2.set_yticks(y, [short(names[i], 45) for i, _ in chart.cost], fontsize=8)
        ax2.set_xlabel("cost per episode ($, 95% interval over tasks)")
        ax2.grid(axis="x", alpha=.3)
    return fig


def curve_figure(curve: Curve) -> Figure:
    _agg()
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (_, pts) in enumerate(curve.series):
        xs = [p[0] for p in pts]
        ys = np.array([p[1].value for p in pts])
        lo = np.array([p[1].lo for p in pts])
        hi = np.array([p[1].hi for p in pts])
        err = np.vstack([np.nan_to_num(ys - lo), np.nan_to_num(hi - ys)])
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=f"series {i + 1}")
    ax.set_xlabel(curve.xfield)
    ax.set_ylabel(curve.metric)
    if all(0 <= p[1].value <= 1 for _, pts in curve.series for p in pts):
        ax.set_ylim(-0.02, 1.02)        # a rate: show the whole scale
    ax.grid(alpha=.3)
    ax.legend(fontsize=8)
    return fig


def per_task_figure(pt: PerTask, labels: list[str]) -> Figure:
    _agg()
    import matplotlib.pyplot as plt

    n = len(labels)
    fig, ax = plt.subplots(figsize=(min(14, 2 + 0.5 * len(pt.tasks) * max(1, n)), 4))
    w = 0.8 / max(1, n)
    names = plot_names(labels)
    for i, per in enumerate(pt.values):
        ys = [per.get(t, np.nan) for t in pt.tasks]
        ax.bar(np.arange(len(pt.tasks)) + i * w, ys, w, label=names[i])
    ax.set_xticks(np.arange(len(pt.tasks)) + w * (n - 1) / 2, pt.tasks, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(pt.metric)
    vals = [v for per in pt.values for v in per.values()]
    if vals and all(0 <= v <= 1 for v in vals):
        ax.set_ylim(0, 1.02)            # a score in [0, 1]: show the whole scale, zeros included
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=.3)
    return fig


def winrate_figure(r: Ratings, names: list[str]) -> Figure:
    _agg()
    import matplotlib.pyplot as plt

    k = len(names)
    M, lo, hi, N = r.win, r.win_lo, r.win_hi, r.comparisons
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * k, 1.2 + 1.1 * k))
    im = ax.imshow(np.nan_to_num(M * 100, nan=np.nan), cmap="Blues", vmin=0, vmax=100)
    for i, j in itertools.product(range(k), repeat=2):
        if i != j and N[i, j] > 0:
            iv = "" if np.isnan(lo[i, j]) else f"\n[{lo[i, j] * 100:.0f}-{hi[i, j] * 100:.0f}]"
            ax.text(j, i, f"{M[i, j] * 100:.0f}{iv}",
                    ha="center", va="center", fontsize=8, color="white" if M[i, j] > .6 else "black")
    labels = [short(n) for n in plot_names(names)]
    ax.set_xticks(range(k), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(k), labels, fontsize=8)
    ax.set_xlabel("column system")
    ax.set_ylabel("row system")
    fig.colorbar(im, ax=ax, label="row wins (%)")
    return fig


def dimensions_figure(d: Dimensions, names: list[str]) -> Figure:
    _agg()
    import matplotlib.pyplot as plt

    pairs = list(d.shares)
    fig, axes = plt.subplots(len(pairs), 1, figsize=(9, 0.9 + 0.5 * (len(d.dims) + 2) * len(pairs)), squeeze=False)
    labels = [*d.dims, "Overall"]
    names = plot_names(names)
    for ax, (a, b) in zip(axes[:, 0], pairs):
        s = np.array([x[:3] for x in d.shares[(a, b)]], dtype=float) * 100
        y = np.arange(len(labels))[::-1]
        left = np.zeros(len(labels))
        for k, (col, lab) in enumerate((("#2b6cb0", f"{short(names[a], 30)} wins"), ("#bbbbbb", "tie"),
                                         ("#dd6b20", f"{short(names[b], 30)} wins"))):
            vals = np.nan_to_num(s[:, k])
            ax.barh(y, vals, left=left, color=col, label=lab)
            left += vals
        ax.set_yticks(y, labels, fontsize=8)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of verdicts")
        ax.set_title(f"{short(names[a], 45)} vs {short(names[b], 45)}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
