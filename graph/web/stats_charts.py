"""The statistics page's pictures (issue 25 "Statistics and pictures"; seed 004 提供记忆统计信息, 记忆可视化界面), drawn on
the server with matplotlib from `api.statistics.series` (`ChartSeries`), as SVG (glyphs as paths: the Chinese
labels show in any browser, whatever fonts it has) or PNG.

Thread-safe by construction: each picture is its own `matplotlib.figure.Figure` on an Agg canvas, never pyplot's
global figure registry, and every label gets the CJK font as an explicit `FontProperties` instead of a change to the
global `rcParams`; so pictures render in worker threads side by side. The font is WenQuanYi Micro Hei
(`fonts-wqy-microhei`), found through matplotlib's font manager; without it the pictures use matplotlib's default
font (Chinese labels then show as boxes) and a warning says so once.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, fontManager
from matplotlib.ticker import MaxNLocator
from personalab.graph.api.schemas.memory import ChartSeries, TurnFigures
from personalab.graph.api.statistics import PARALLEL_STEPS

log = logging.getLogger(__name__)

CJK_FONT_NAMES = ("WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans SC")
CJK_FONT_FILE = "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"
FORMATS = {"svg": "image/svg+xml", "png": "image/png"}
LAYER_ORDER = ("active", "situational", "event_log", "archive", "record")
# the turn graph's nodes in the order a turn runs them (graph/graph.py)
NODE_ORDER = (
    "history_fetch",
    "memory_build",
    "query_rewrite",
    "rag_retrieve",
    "director",
    "generate",
    "abort_turn",
    "progress_parse",
    "write_back",
    "review",
    "maintenance",
)
BRANCH_MARKERS = {"current": ("o", "#2b6cb0"), "other": ("x", "#c05621"), "no_line": ("s", "#718096")}


@lru_cache(maxsize=1)
def cjk_font() -> FontProperties:
    """The CJK font for every label: the first of `CJK_FONT_NAMES` matplotlib's font manager knows, else the wqy
    file by its path (a font manager cache made before the font was installed), else matplotlib's default with a
    logged warning."""
    for name in CJK_FONT_NAMES:
        for entry in fontManager.ttflist:
            if entry.name == name:
                return FontProperties(fname=entry.fname)
    try:
        fontManager.addfont(CJK_FONT_FILE)
        return FontProperties(fname=CJK_FONT_FILE)
    except (OSError, RuntimeError, ValueError):
        log.warning(
            "no CJK font found (%s): the statistics pictures' Chinese labels will not show; install fonts-wqy-microhei",
            ", ".join(CJK_FONT_NAMES),
        )
        return FontProperties()


def _label(t: Mapping[str, str], prefix: str, name: str) -> str:
    """A series name in the page's language: the catalog's `prefix + name`, else the name as stored."""
    return t.get(prefix + name, name)


def _style(ax: Axes, title: str, xlabel: str, ylabel: str, font: FontProperties) -> None:
    ax.set_title(title, fontproperties=font, fontsize=12)
    ax.set_xlabel(xlabel, fontproperties=font)
    ax.set_ylabel(ylabel, fontproperties=font)
    ax.grid(True, alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # turns are whole numbers
    for tick in (*ax.get_xticklabels(), *ax.get_yticklabels()):
        tick.set_fontproperties(font)


def _legend(ax: Axes, font: FontProperties) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(prop=font, fontsize=8, loc="best", framealpha=0.8)


def _nothing(ax: Axes, rows: Sequence[Mapping[str, Any]], t: Mapping[str, str], font: FontProperties) -> None:
    """A panel whose turns have no value at all says so, instead of an empty frame."""
    if not any(rows):
        ax.text(0.5, 0.5, t["chart_nothing"], ha="center", va="center", transform=ax.transAxes, fontproperties=font)
        ax.set_ylim(0, 1)


def _keys(rows: Sequence[Mapping[str, Any]], order: Sequence[str] = ()) -> list[str]:
    """The series names over all turns, known ones in `order` first."""
    seen = {key for row in rows for key in row}
    return [k for k in order if k in seen] + sorted(seen - set(order))


def _stacked_bars(
    ax: Axes, turns: list[int], rows: list[Mapping[str, float]], t: Mapping[str, str], prefix: str, order: Sequence[str]
) -> None:
    bottom = [0.0] * len(turns)
    palette = colormaps["tab20"]
    for number, key in enumerate(_keys(rows, order)):
        values = [float(row.get(key) or 0) for row in rows]
        color = palette(number % 20)
        ax.bar(turns, values, bottom=bottom, label=_label(t, prefix, key), width=0.7, color=color)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]


def _memories(fig: Figure, turns: list[TurnFigures], t: Mapping[str, str], font: FontProperties) -> None:
    numbers = [p.turn for p in turns]
    left, right = fig.subplots(1, 2)
    for layer in _keys([p.memories_total for p in turns], LAYER_ORDER):
        left.plot(
            numbers, [p.memories_total.get(layer, 0) for p in turns], marker="o", label=_label(t, "layer_", layer)
        )
    _style(left, t["chart_memories_by_layer"], t["chart_turn"], t["chart_count"], font)
    _legend(left, font)
    _stacked_bars(right, numbers, [p.memories_made_by_type for p in turns], t, "type_", ())
    _style(right, t["chart_memories_by_type"], t["chart_turn"], t["chart_count"], font)
    _legend(right, font)


def _retrieval(fig: Figure, turns: list[TurnFigures], t: Mapping[str, str], font: FontProperties) -> None:
    numbers = [p.turn for p in turns]
    left, right = fig.subplots(1, 2)
    _stacked_bars(left, numbers, [p.retrieved_by_trigger for p in turns], t, "trigger_", ())
    _nothing(left, [p.retrieved_by_trigger for p in turns], t, font)
    _style(left, t["chart_retrieved_by_trigger"], t["chart_turn"], t["chart_count"], font)
    _legend(left, font)
    right.plot(numbers, [p.retrieved for p in turns], marker="o", label=t["chart_retrieved"])
    right.plot(numbers, [p.used for p in turns], marker="s", label=t["chart_used"])
    rate = right.twinx()
    rate.plot(
        numbers,
        [p.used / p.retrieved if p.retrieved else 0.0 for p in turns],
        color="#805ad5",
        linestyle="--",
        label=t["chart_use_rate"],
    )
    rate.set_ylim(0, 1.05)
    right.set_ylim(bottom=0)
    rate.set_ylabel(t["chart_use_rate"], fontproperties=font)
    _style(right, t["chart_retrieval_use"], t["chart_turn"], t["chart_count"], font)
    handles, labels = right.get_legend_handles_labels()
    more, more_labels = rate.get_legend_handles_labels()
    right.legend(handles + more, labels + more_labels, prop=font, loc="best", framealpha=0.8)


def _growth(fig: Figure, turns: list[TurnFigures], t: Mapping[str, str], font: FontProperties) -> None:
    numbers = [p.turn for p in turns]
    ax = fig.subplots()
    ax.bar(numbers, [sum(p.memories_made.values()) for p in turns], color="#90cdf4", label=t["chart_made"])
    ax.plot(
        numbers, [sum(p.memories_total.values()) for p in turns], color="#2b6cb0", marker="o", label=t["chart_total"]
    )
    _style(ax, t["chart_growth"], t["chart_turn"], t["chart_count"], font)
    _legend(ax, font)


def _time(fig: Figure, turns: list[TurnFigures], t: Mapping[str, str], font: FontProperties) -> None:
    """Each turn as tall as the graph took (`graph_ms`): its critical path's nodes stacked in the order they run, the
    time outside them on top, and a node that ran beside a longer one (`node_parallel_ms`: the director beside the
    retrieval) as a narrow hatched bar next to the stack, starting where its step starts, never added to it."""
    numbers = [p.turn for p in turns]
    ax = fig.subplots()
    rows: list[Mapping[str, float]] = [
        {**p.node_path_ms, **({"other": p.other_ms} if p.other_ms else {})} for p in turns
    ]
    _stacked_bars(ax, numbers, rows, t, "node_", (*NODE_ORDER, "other"))
    width = 0.7
    for key in _keys([p.node_parallel_ms for p in turns], NODE_ORDER):
        values = [float(p.node_parallel_ms.get(key) or 0) for p in turns]
        ax.bar(
            [n + width / 2 + 0.08 for n in numbers],
            values,
            bottom=[_step_start(p.node_path_ms, key) for p in turns],
            width=0.16,
            color="white",
            edgecolor="#4a5568",
            hatch="///",
            label=f"{_label(t, 'node_', key)} ({t['chart_parallel']})",
        )
    timed = [(n, p.graph_ms) for n, p in zip(numbers, turns, strict=True) if p.graph_ms is not None]
    if timed:
        ax.scatter(
            [n for n, _ in timed], [ms for _, ms in timed], marker="_", s=400, color="black", label=t["chart_graph_ms"]
        )
    _nothing(ax, rows, t, font)
    _style(ax, t["chart_node_time"], t["chart_turn"], t["chart_ms"], font)
    if ax.get_legend_handles_labels()[0]:  # beside the plot: a dozen series would cover the bars
        ax.legend(prop=font, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), framealpha=0.8)


def _step_start(path: Mapping[str, float], node: str) -> float:
    """Where a parallel node's step starts on its turn's stack: the time of the path's nodes that run before it."""
    at = NODE_ORDER.index(node) if node in NODE_ORDER else len(NODE_ORDER)
    step = next((group for group in PARALLEL_STEPS if node in group), (node,))
    first = min(NODE_ORDER.index(name) for name in step if name in NODE_ORDER) if step else at
    return sum(ms for name, ms in path.items() if name in NODE_ORDER and NODE_ORDER.index(name) < first)


def _tokens(fig: Figure, turns: list[TurnFigures], t: Mapping[str, str], font: FontProperties) -> None:
    numbers = [p.turn for p in turns]
    ax = fig.subplots()
    _stacked_bars(ax, numbers, [p.region_tokens for p in turns], t, "region_", ("head", "middle", "retrieved", "tail"))
    _nothing(ax, [p.region_tokens for p in turns], t, font)
    _style(ax, t["chart_region_tokens"], t["chart_turn"], t["chart_tokens"], font)
    _legend(ax, font)


def _story(fig: Figure, turns: list[TurnFigures], t: Mapping[str, str], font: FontProperties) -> None:
    numbers = [p.turn for p in turns]
    left, right = fig.subplots(1, 2)
    for name in ("trust", "affection", "familiarity"):
        values = [(p.relationship or {}).get(name) for p in turns]
        left.plot(numbers, [v if v is not None else float("nan") for v in values], marker="o", label=t[f"rel_{name}"])
    _style(left, t["chart_relationship"], t["chart_turn"], t["chart_value"], font)
    _legend(left, font)
    right.step(numbers, [p.plot_completed or 0 for p in turns], where="post", marker="o", label=t["chart_plot_done"])
    # the outline's points are numbered from 1 (seed 002), as `current_plot_index` is
    right.plot(numbers, [p.plot_index or 0 for p in turns], marker="s", label=t["chart_plot_current"])
    points = max((p.plot_points or 0 for p in turns), default=0)
    if points:
        right.set_ylim(0, points + 0.5)
    _style(right, t["chart_plot"], t["chart_turn"], t["chart_plot_points"], font)
    right.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend(right, font)


def _timeline(fig: Figure, series: ChartSeries, t: Mapping[str, str], font: FontProperties) -> None:
    ax = fig.subplots()
    layers = _keys([{m.layer: 1} for m in series.timeline], LAYER_ORDER)
    row = {layer: i for i, layer in enumerate(layers)}
    for branch, (marker, color) in BRANCH_MARKERS.items():
        mine = [m for m in series.timeline if m.branch == branch]
        if mine:
            ax.scatter(
                [m.turn for m in mine],
                [row[m.layer] for m in mine],
                marker=marker,
                color=color,
                alpha=0.7,
                label=t[f"branch_{branch}"],
            )
    ax.set_yticks(range(len(layers)), [_label(t, "layer_", layer) for layer in layers])
    _style(ax, t["chart_timeline"], t["chart_turn"], t["chart_layer"], font)
    _legend(ax, font)


def _per_turn(draw: Callable[[Figure, list[TurnFigures], Mapping[str, str], FontProperties], None]) -> Any:
    return lambda fig, series, t, font: draw(fig, series.turns, t, font)


CHARTS: dict[str, tuple[str, Callable[[Figure, ChartSeries, Mapping[str, str], FontProperties], None], float]] = {
    # name: (title key, drawer, height in inches)
    "memories": ("chart_memories", _per_turn(_memories), 3.6),
    "retrieval": ("chart_retrieval", _per_turn(_retrieval), 3.6),
    "growth": ("chart_growth", _per_turn(_growth), 3.2),
    "time": ("chart_node_time", _per_turn(_time), 3.6),
    "tokens": ("chart_region_tokens", _per_turn(_tokens), 3.2),
    "story": ("chart_story", _per_turn(_story), 3.6),
    "timeline": ("chart_timeline", _timeline, 3.2),
}


def render_chart(name: str, series: ChartSeries, t: Mapping[str, str], fmt: str) -> bytes:
    """The picture `name` (one of `CHARTS`) of `series` as `fmt` (svg or png), labels from the catalog `t`. An
    instance without turns gets a picture saying so. Call it in a worker thread: it takes a few hundred ms."""
    title, draw, height = CHARTS[name]
    font = cjk_font()
    fig = Figure(figsize=(10, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # Agg, never pyplot's shared state
    if not series.turns and not (name == "timeline" and series.timeline):
        fig.text(0.5, 0.5, t["stats_empty"], ha="center", va="center", fontproperties=font, fontsize=14)
        fig.suptitle(t[title], fontproperties=font)
    else:
        draw(fig, series, t, font)
    out = io.BytesIO()
    fig.savefig(out, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return out.getvalue()
