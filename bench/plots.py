"""Plots of the latency benchmarks (PNG files, no display): timelines and grouped bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_timeline(path: Path, title: str, lanes: dict[str, dict[str, Any]]) -> None:
    """One subplot per channel; rows: tokens, cuts, synthesis, audio sent, received, playing."""
    plt = pyplot()
    fig, axes = plt.subplots(len(lanes), 1, figsize=(11, 2.6 * len(lanes)), sharex=True, squeeze=False)
    rows = ("tokens in", "segment cut", "synthesis", "audio sent", "audio received", "playing")
    for ax, (channel, tl) in zip(axes[:, 0], lanes.items()):
        y = {name: len(rows) - i for i, name in enumerate(rows)}
        ax.vlines(tl["tokens_ms"], y["tokens in"] - 0.3, y["tokens in"] + 0.3, color="0.5", lw=0.8)
        ax.plot(tl["cuts_ms"], [y["segment cut"]] * len(tl["cuts_ms"]), "v", color="tab:purple")
        for n, (a, b) in enumerate(tl["synthesis_ms"]):
            ax.broken_barh(
                [(a, max(b - a, 1.0))], (y["synthesis"] - 0.35, 0.7), color="tab:orange" if n % 2 else "tab:brown"
            )
        ax.vlines(tl["sent_ms"], y["audio sent"] - 0.3, y["audio sent"] + 0.3, color="tab:blue", lw=0.8)
        ax.vlines(tl["received_ms"], y["audio received"] - 0.3, y["audio received"] + 0.3, color="tab:green", lw=0.8)
        ax.broken_barh([(a, b - a) for a, b in tl["playing_ms"]], (y["playing"] - 0.35, 0.7), color="tab:green")
        ax.broken_barh([(a, b - a) for a, b in tl["stall_gaps_ms"]], (y["playing"] - 0.35, 0.7), color="tab:red")
        ax.set_yticks(list(y.values()), list(y.keys()))
        ttfb = tl["ttfb_ms"]
        ax.set_title(f"{channel}: first audio {ttfb:.0f} ms" if ttfb else channel, fontsize=10, loc="left")
        if ttfb:
            ax.axvline(ttfb, color="tab:green", ls=":", lw=1)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms since the request (server events: since its first input)")
    fig.suptitle(title)
    _save(fig, path)


def plot_bars(
    path: Path, title: str, groups: dict[str, dict[str, Any]], ylabel: str = "time to first audio (ms)"
) -> None:
    """Grouped bars: the mean per channel and group, with a median dot and a p90 whisker
    (``groups``: group -> channel -> a ``bench.common.Stats``)."""
    plt = pyplot()
    channels = list(dict.fromkeys(c for g in groups.values() for c in g))
    width = 0.8 / max(1, len(channels))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.8 * len(groups) * max(1, len(channels)) / 2), 4.2))
    for j, channel in enumerate(channels):
        xs = [i + (j - (len(channels) - 1) / 2) * width for i, g in enumerate(groups.values()) if channel in g]
        st = [g[channel] for g in groups.values() if channel in g]
        ax.bar(
            xs,
            [s.mean for s in st],
            width * 0.9,
            label=channel,
            yerr=[[0] * len(st), [max(0.0, s.p90 - s.mean) for s in st]],
            capsize=3,
        )
        ax.plot(xs, [s.median for s in st], "k.", ms=5)
        for x, s in zip(xs, st):
            ax.annotate(f"{s.mean:.0f}", (x, s.mean), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title + "  (bar: mean, dot: median, whisker: p90)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
