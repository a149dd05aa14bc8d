"""The report of a batch evaluation run (issue 12): `report.json`, `report.md` and PNG plots in the output folder.

Per scenario and overall: probe hit rate by distance between the fact and its probe (turns); secrets leaked
(goal 0); memories of another instance retrieved (goal 0); director adherence (outline points completed per 10 turns, fallbacks and how many recovered, forged
markers honoured — goal 0); core-memory rewrites accepted / rejected; prompt tokens per turn against the whole
history's tokens (seed 002: why retrieval, not the whole history); per-node latency p50 / p95 and RSS over turns; per turn the graph's time beside
the whole process's (--via cli). With `--conditions` (issue 30): the conditions side by side per scenario (memory
use, contradictions, in character, history that did not fit, the judge), each failed probe with its reply, and the
scenario's goals.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1-20", 1, 20),
    ("21-50", 21, 50),
    ("51-100", 51, 100),
    ("101-300", 101, 300),
    ("300+", 301, 10**9),
)
NO_SOURCE = "no source"  # the phrase was never said before the probe (world book, knowledge, character)
GOAL_HIT_RATE = 0.8
GOAL_LATENCY_MS = 100.0  # seed 002 技术约束: a turn without the model's time, p95
MODEL_NODE = "generate"
PROCESS = "process"  # the timings key of the whole turn process's wall time (--via cli, issue 29)
CJK_FONTS = ("Noto Sans CJK", "Noto Sans SC", "Source Han Sans", "WenQuanYi", "SimHei", "Microsoft YaHei", "PingFang")


def bucket(distance: int | None) -> str:
    if distance is None:
        return NO_SOURCE
    for label, low, high in BUCKETS:
        if low <= distance <= high:
            return label
    return BUCKETS[0][0]


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest rank."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(share * len(ordered)) - 1)])


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 3) if total else None


def checks_of(results: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [c for r in results for p in r.get("probes", []) for c in p["checks"] if c["kind"] == kind]


def by_distance(checks: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Hits / checks / rate of `retrieved` checks per distance bucket."""
    table: dict[str, dict[str, Any]] = {}
    for label in [b[0] for b in BUCKETS] + [NO_SOURCE]:
        inside = [c for c in checks if bucket(c.get("distance")) == label]
        if inside:
            table[label] = _cell(inside)
    table["all"] = _cell(checks)
    return table


def _cell(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Hits (the fact reached the model), of which `in_window` by the recent-dialogue window rather than the
    retrieved region (`play.found_where`), and how many had the phrase anywhere in the prompt."""
    hits = sum(1 for c in checks if c["ok"])
    window = sum(1 for c in checks if c["ok"] and c.get("where") == "recent_window")
    seen = sum(1 for c in checks if c.get("in_prompt"))
    return {
        "hits": hits,
        "checks": len(checks),
        "rate": _rate(hits, len(checks)),
        "in_window": window,
        "in_prompt": seen,
    }


def _hits_text(cell: dict[str, Any]) -> str:
    """`hits/checks`, with the hits the recent-dialogue window gave named apart."""
    window = cell.get("in_window", 0)
    return f"{cell['hits']}/{cell['checks']}" + (f", {window} in the recent window" if window else "")


def latency(results: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50 / p95 per node over every turn of `results`, and the turn without the model node."""
    merged: dict[str, list[float]] = {}
    for result in results:
        timings = result.get("timings_ms") or {}
        for node, values in timings.items():
            merged.setdefault(node, []).extend(float(v) for v in values)
        totals = timings.get("total") or []
        models = timings.get(MODEL_NODE) or []
        if len(totals) == len(models):
            merged.setdefault(f"total - {MODEL_NODE}", []).extend(t - m for t, m in zip(totals, models, strict=True))
    return {
        node: {"runs": len(v), "p50": round(percentile(v, 0.5), 2), "p95": round(percentile(v, 0.95), 2)}
        for node, v in merged.items()
    }


def turn_time(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per turn, the graph's own time and (--via cli) the whole `personalab turn` process's wall time, start-up and
    imports included (issue 29: a one-shot turn costs what its process costs, not what its graph costs): p50 / p95
    of each, and the process's extra time over the graph's; `process` is None where the turns ran in one process."""
    graph: list[float] = []
    process: list[float] = []
    for result in results:
        timings = result.get("timings_ms") or {}
        graph.extend(float(v) for v in timings.get("total") or [])
        process.extend(float(v) for v in timings.get(PROCESS) or [])

    def cell(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        return {
            "turns": len(values),
            "p50": round(percentile(values, 0.5), 1),
            "p95": round(percentile(values, 0.95), 1),
        }

    extra = [p - g for p, g in zip(process, graph, strict=True)] if len(process) == len(graph) else []
    return {"graph": cell(graph), "process": cell(process), "process_over_graph": cell(extra)}


def scenario_summary(result: dict[str, Any]) -> dict[str, Any]:
    series = [row for rows in (result.get("series") or {}).values() for row in rows]
    prompt_tokens = [row["prompt_tokens"] for row in series]
    history_end = [rows[-1]["history_tokens"] for rows in (result.get("series") or {}).values() if rows]
    rss = [row["rss_mb"] for row in series]
    secrets = result.get("secrets") or {}
    return {
        "name": result["name"],
        "status": result.get("status"),
        "error": result.get("error"),
        "turns": result.get("turns_played", 0),
        "instances": result.get("instances"),
        "via": result.get("via", "inprocess"),
        "retrieved": by_distance(checks_of([result], "retrieved")),
        "prompt_lacks": _pass_fail(checks_of([result], "prompt_lacks")),
        "reply": _pass_fail(checks_of([result], "reply")),
        "secrets": {"said": secrets.get("said", 0), "leaked": len(secrets.get("leaks", []))},
        "other_instances": _other_instances([result]),
        "curated": curated_figures(result),
        "director": result.get("director") or {},
        "forged_markers": result.get("forged_markers") or {},
        "maintenance": result.get("maintenance") or {},
        "tokens": {
            "prompt_mean": round(sum(prompt_tokens) / len(prompt_tokens), 1) if prompt_tokens else 0,
            "prompt_max": max(prompt_tokens, default=0),
            "history_end": max(history_end, default=0),
        },
        "rss_mb": {"first": rss[0] if rss else 0, "last": rss[-1] if rss else 0, "max": max(rss, default=0)},
        "retrieval_timeouts": result.get("retrieval_timeouts", 0),
        "turn_time_ms": turn_time([result]),
        "judge": _judge_summary(result.get("judge") or []),
        "wall_s": result.get("wall_s"),
    }


def _other_instances(results: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Long-term memories retrieved into the prompts, and how many of them belong to another instance."""
    tallies = [r.get("other_instances") or {} for r in results]
    return {
        "memories": sum(int(t.get("memories", 0)) for t in tallies),
        "foreign": sum(len(t.get("foreign", [])) for t in tallies),
    }


def _pass_fail(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    passed = sum(1 for c in checks if c["ok"])
    return {"passed": passed, "checks": len(checks), "rate": _rate(passed, len(checks))}


def _judge_summary(scores: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    valid = [s for s in scores if isinstance(s, dict) and s.get("ok")]
    if not scores:
        return None
    out: dict[str, Any] = {"probes": len(scores), "answered": len(valid)}
    for key in ("persona_consistency", "memory_used"):
        values = [float(s[key]) for s in valid if isinstance(s.get(key), int | float)]
        out[key] = round(sum(values) / len(values), 3) if values else None
    return out


def replies(results: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the model's replies looked like (issue 17: a real model): turns whose reply kept seed 000's 【emotion】
    format, turns with a [PROGRESS] marker the parser took, and whole-turn time p50 / p95 (the model included)."""
    series = [row for r in results for rows in (r.get("series") or {}).values() for row in rows]
    formatted = sum(1 for row in series if row.get("formatted"))
    markers = sum(1 for row in series if row.get("marker"))
    total = [float(row.get("total_ms") or 0.0) for row in series]
    noted = [row for row in series if row.get("format_note")]
    return {
        "turns": len(series),
        "formatted": formatted,
        "format_rate": _rate(formatted, len(series)),
        # turns whose prompt carried the format note (the last line had no 【emotion】), and how many then kept it
        "format_notes": len(noted),
        "formatted_after_note": sum(1 for row in noted if row.get("formatted")),
        "markers": markers,
        "marker_rate": _rate(markers, len(series)),
        "turn_ms_p50": round(percentile(total, 0.5), 1),
        "turn_ms_p95": round(percentile(total, 0.95), 1),
    }


def _notes(replies: Mapping[str, Any]) -> str:
    """The format notes of `replies` (a row of `replies()`), when any was given."""
    if not replies.get("format_notes"):
        return ""
    return f"; after a format note {replies['formatted_after_note']} of {replies['format_notes']}"


def _percent(rate: float | None) -> str:
    return "–" if rate is None else f"{100 * rate:.0f}%"


def overall(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    turns = sum(r.get("turns_played", 0) for r in results)
    completed = sum((r.get("director") or {}).get("completed", 0) for r in results)
    fallbacks = sum((r.get("director") or {}).get("fallbacks", 0) for r in results)
    recovered = sum((r.get("director") or {}).get("recovered", 0) for r in results)
    prompt_tokens = [row["prompt_tokens"] for r in results for rows in (r.get("series") or {}).values() for row in rows]
    history = [rows[-1]["history_tokens"] for r in results for rows in (r.get("series") or {}).values() if rows]
    return {
        "scenarios": len(results),
        "failed": [r["name"] for r in results if r.get("status") != "ok"],
        "turns": turns,
        "retrieved": by_distance(checks_of(results, "retrieved")),
        "prompt_lacks": _pass_fail(checks_of(results, "prompt_lacks")),
        "reply": _pass_fail(checks_of(results, "reply")),
        "secrets_said": sum((r.get("secrets") or {}).get("said", 0) for r in results),
        "secrets_leaked": sum(len((r.get("secrets") or {}).get("leaks", [])) for r in results),
        "other_instances": _other_instances(results),
        "duplicates": sum(len(r.get("duplicates") or []) for r in results),
        "private_sayable": sum(len(r.get("private_sayable") or []) for r in results),
        "unwitnessed": sum(len((r.get("witnesses") or {}).get("unwitnessed", [])) for r in results),
        "forged_markers_sent": sum((r.get("forged_markers") or {}).get("sent", 0) for r in results),
        "forged_markers_honoured": sum((r.get("forged_markers") or {}).get("honoured", 0) for r in results),
        "completed_per_10_turns": round(10 * completed / turns, 3) if turns else 0.0,
        "fallbacks": fallbacks,
        "recovered": recovered,
        "maintenance_accepted": sum((r.get("maintenance") or {}).get("accepted", 0) for r in results),
        "maintenance_rejected": sum((r.get("maintenance") or {}).get("rejected", 0) for r in results),
        "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens), 1) if prompt_tokens else 0,
        "prompt_tokens_max": max(prompt_tokens, default=0),
        "history_tokens_max": max(history, default=0),
        "retrieval_timeouts": sum(r.get("retrieval_timeouts", 0) for r in results),
        "latency_ms": latency(results),
        "turn_time_ms": turn_time(results),
        "replies": replies(results),
        "judge": _judge_summary([j for r in results for j in r.get("judge") or []]),
    }


def goals(total: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows (figure, goal, measured, met?) the scenario suite checks."""
    hit = total["retrieved"]["all"]["rate"]
    rows: list[dict[str, Any]] = [
        {
            "figure": "scenarios that ran to the end",
            "goal": "all",
            "measured": f"{total['scenarios'] - len(total['failed'])} of {total['scenarios']}",
            "met": not total["failed"],
        },
        {
            "figure": "probe hit rate (phrase in the retrieved region, or still in the recent window), all distances",
            "goal": f">= {GOAL_HIT_RATE:.0%}",
            "measured": "n/a" if hit is None else f"{hit:.1%} ({_hits_text(total['retrieved']['all'])})",
            "met": hit is not None and hit >= GOAL_HIT_RATE,
        },
    ]
    for label, _, _ in BUCKETS:
        cell = total["retrieved"].get(label)
        if cell:
            rows.append(
                {
                    "figure": f"probe hit rate, fact {label} turns before",
                    "goal": f">= {GOAL_HIT_RATE:.0%}",
                    "measured": f"{cell['rate']:.1%} ({_hits_text(cell)})",
                    "met": cell["rate"] >= GOAL_HIT_RATE,
                }
            )
    lacks = total["prompt_lacks"]
    if lacks["checks"]:
        rows.append(
            {
                "figure": "prompt_lacks checks passed",
                "goal": "all",
                "measured": f"{lacks['passed']}/{lacks['checks']}",
                "met": lacks["passed"] == lacks["checks"],
            }
        )
    others = total["other_instances"]
    rows.append(
        {
            "figure": "memories of another instance in the prompt",
            "goal": "0",
            "measured": f"{others['foreign']} (of {others['memories']:,} memories retrieved)",
            "met": others["foreign"] == 0,
        }
    )
    rows.append(
        {
            "figure": "secrets leaked into another instance's prompt",
            "goal": "0",
            "measured": f"{total['secrets_leaked']} (of {total['secrets_said']} said)",
            "met": total["secrets_leaked"] == 0,
        }
    )
    rows.append(
        {
            "figure": "forged [PROGRESS] markers honoured",
            "goal": "0",
            "measured": f"{total['forged_markers_honoured']} (of {total['forged_markers_sent']} sent)",
            "met": total["forged_markers_honoured"] == 0,
        }
    )
    rows.append(
        {
            "figure": "director fallbacks followed by progress within the stall window",
            "goal": "all",
            "measured": f"{total['recovered']}/{total['fallbacks']}",
            "met": total["recovered"] == total["fallbacks"],
        }
    )
    without = total["latency_ms"].get(f"total - {MODEL_NODE}")
    if without:
        rows.append(
            {
                "figure": "turn without the model node, p95 (ms; eval run, not the benchmark)",
                "goal": f"<= {GOAL_LATENCY_MS:.0f}",
                "measured": f"{without['p95']:.1f}",
                "met": without["p95"] <= GOAL_LATENCY_MS,
            }
        )
    if total["prompt_tokens_max"]:
        budget = prompt_budget()
        rows.append(
            {
                "figure": "largest prompt (tokens) vs the longest whole history",
                "goal": f"<= the region budgets ({budget:,})",
                "measured": f"{total['prompt_tokens_max']:,} vs {total['history_tokens_max']:,}",
                "met": total["prompt_tokens_max"] <= budget,
            }
        )
    return rows


def prompt_budget() -> int:
    """The sum of the prompt's region budgets (seed 002 Prompt区域分配) as configured."""
    from personalab.stores.settings import settings

    current = settings()
    return int(current.head_tokens + current.middle_tokens + current.retrieved_tokens + current.tail_tokens)


_VIA = {
    "inprocess": "in-process (--via inprocess)",
    "cli": "as one `personalab turn --json` process each (--via cli)",
    "served": "through `langgraph dev` (--via served)",
}


def markdown(
    results: Sequence[dict[str, Any]],
    total: dict[str, Any],
    meta: dict[str, Any],
    plots: Sequence[str],
    extra_rows: Sequence[dict[str, Any]] = (),
) -> str:
    lines = ["# PersonaLab evaluation report", ""]
    lines.append(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} · model {meta.get('model_label') or meta.get('model')} · "
        f"{total['scenarios']} scenario(s), {total['turns']:,} turns · parallel {meta.get('parallel')} · "
        f"turns played {_VIA.get(str(meta.get('via') or 'inprocess'), meta.get('via'))}"
    )
    lines += ["", "## Summary", "", "| figure | goal | measured | met? |", "| --- | --- | --- | --- |"]
    for row in [*extra_rows, *goals(total)]:
        lines.append(f"| {row['figure']} | {row['goal']} | {row['measured']} | {'yes' if row['met'] else '**NO**'} |")
    missed = [row["figure"] for row in [*extra_rows, *goals(total)] if not row["met"]]
    lines += ["", f"Goals missed: {', '.join(missed)}." if missed else "Every goal met."]
    labels = [b[0] for b in BUCKETS] + [NO_SOURCE, "all"]
    lines += ["", "## Probe hit rate by distance between fact and probe (turns)", ""]
    lines.append(
        "`retrieved` checks: the fact reaches the model — the phrase is in a message of the prompt's retrieved region "
        "(long-term memory, world knowledge, director blocks), or, for a fact still inside the recent-dialogue window "
        "(the last `recall_turns` turns), in that window, which the retrieved region does not repeat (seed 001 "
        "避免重复, issue 26). Cells: rate (hits/checks; of the hits, how many only the recent window held; how many "
        "checks had the phrase anywhere in the prompt)."
    )
    lines += ["", "| scenario | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]
    summaries = [scenario_summary(r) for r in results]
    for summary in [*summaries, {"name": "**all**", "retrieved": total["retrieved"]}]:
        cells = []
        for label in labels:
            cell = summary["retrieved"].get(label)
            cells.append(
                f"{cell['rate']:.0%} ({cell['hits']}/{cell['checks']}; window {cell.get('in_window', 0)}; "
                f"{cell.get('in_prompt', 0)})"
                if cell and cell["rate"] is not None
                else "–"
            )
        lines.append(f"| {summary['name']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Per scenario",
        "",
        "| scenario | status | turns | prompt_lacks | reply | secrets leaked | points done /10 turns | fallbacks (recovered) | forged honoured | core memory acc./rej. | prompt tok. mean / max | history tok. | RSS MiB max | wall s |",
        "| --- |" + " --- |" * 13,
    ]
    for s in summaries:
        d = s["director"]
        lines.append(
            f"| {s['name']} | {s['status']} | {s['turns']} | {s['prompt_lacks']['passed']}/{s['prompt_lacks']['checks']} | "
            f"{s['reply']['passed']}/{s['reply']['checks']} | {s['secrets']['leaked']} of {s['secrets']['said']} | "
            f"{d.get('completed_per_10_turns', 0)} ({d.get('completed', 0)}/{d.get('outline_points', 0) * (s['instances'] or 1)} pts) | {d.get('fallbacks', 0)} ({d.get('recovered', 0)}) | "
            f"{s['forged_markers'].get('honoured', 0)}/{s['forged_markers'].get('sent', 0)} | "
            f"{s['maintenance'].get('accepted', 0)}/{s['maintenance'].get('rejected', 0)} | "
            f"{s['tokens']['prompt_mean']} / {s['tokens']['prompt_max']} | {s['tokens']['history_end']:,} | {s['rss_mb']['max']} | {s['wall_s']} |"
        )
    failed = [s for s in summaries if s["status"] != "ok"]
    if failed:
        lines += ["", "### Failed scenarios", ""]
        lines += [f"- **{s['name']}**: {s['error']}" for s in failed]
    lines += [
        "",
        "## Latency per node (ms, every turn of every scenario)",
        "",
        "| node | runs | p50 | p95 |",
        "| --- | --- | --- | --- |",
    ]
    for node, cell in total["latency_ms"].items():
        lines.append(f"| {node} | {cell['runs']} | {cell['p50']} | {cell['p95']} |")
    lines += [
        "",
        "## Time per turn: the graph's and the whole process's (ms)",
        "",
        "The process's time is what a user of `personalab turn` waits for (--via cli: interpreter start-up, imports "
        "and the graph); it is – where the turns ran in one process.",
        "",
        "| figure | turns | p50 | p95 |",
        "| --- | --- | --- | --- |",
    ]
    names = {"graph": "graph (the turn's total)", "process": "whole process", "process_over_graph": "process − graph"}
    for key, name in names.items():
        c = total["turn_time_ms"][key]
        lines.append(f"| {name} | {c['turns']} | {c['p50']:,} | {c['p95']:,} |" if c else f"| {name} | – | – | – |")
    lines += [
        "",
        "## Prompt size against the whole history",
        "",
        f"Prompt tokens per turn: mean {total['prompt_tokens_mean']:,}, max {total['prompt_tokens_max']:,}; the longest "
        f"instance's whole dialogue: {total['history_tokens_max']:,} tokens (langchain-core's approximate counter at 1.5 "
        "characters per token, as the prompt budgets). Retrieval keeps the prompt bounded while the history grows (seed 002).",
        "",
        f"Core-memory rewrites: {total['maintenance_accepted']} accepted, {total['maintenance_rejected']} rejected. "
        f"Retrievals that hit the time cap: {total['retrieval_timeouts']}.",
    ]
    r = total["replies"]
    lines += [
        "",
        "## Replies",
        "",
        "| turns | 【emotion】 format | progress marker | reply checks (memory used) | turn p50 / p95 ms (model included) |",
        "| --- | --- | --- | --- | --- |",
        f"| {r['turns']} | {r['formatted']} ({_percent(r['format_rate'])}){_notes(r)} | "
        f"{r['markers']} ({_percent(r['marker_rate'])}) | "
        f"{total['reply']['passed']}/{total['reply']['checks']} | {r['turn_ms_p50']:,} / {r['turn_ms_p95']:,} |",
    ]
    if total.get("judge"):
        j = total["judge"]
        lines += [
            "",
            "## LLM judge",
            "",
            f"{j['answered']} of {j['probes']} probes judged: persona consistency {j['persona_consistency']}, memory used in the reply {j['memory_used']} (0–1).",
        ]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({p})" for p in plots]
    lines += [
        "",
        "Figures from the offline scripted model measure the memory engine (what reached the prompt), not a model's "
        "wording; `reply` checks are meaningful with `--model openai`."
        if meta.get("model") == "scripted"
        else "",
    ]
    return "\n".join(lines).rstrip() + "\n"


def plots(results: Sequence[dict[str, Any]], total: dict[str, Any], out: Path) -> list[str]:
    """PNG plots (matplotlib, Agg): hit rate by distance, relationship, prompt vs history tokens, RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    # scenario names in the legends are often Chinese: a CJK font when one is installed; without one the names show
    # as boxes, which is said once here instead of one warning per missing glyph
    cjk = [f.name for f in font_manager.fontManager.ttflist if any(k in f.name for k in CJK_FONTS)]
    if cjk:
        plt.rcParams["font.sans-serif"] = [cjk[0], *plt.rcParams["font.sans-serif"]]
    warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)

    made: list[str] = []
    labels = [b[0] for b in BUCKETS]
    rates = [(total["retrieved"].get(label) or {}).get("rate") for label in labels]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(labels, [r or 0 for r in rates], color=["#4c72b0" if r is not None else "#cccccc" for r in rates])
    for index, label in enumerate(labels):
        cell = total["retrieved"].get(label)
        if cell:  # how many checks each bar stands on
            ax.text(index, (cell["rate"] or 0) + 0.02, f"{cell['hits']}/{cell['checks']}", ha="center", fontsize=8)
    ax.axhline(GOAL_HIT_RATE, color="#c44e52", linestyle="--", linewidth=1, label=f"goal {GOAL_HIT_RATE:.0%}")
    ax.set_ylim(0, 1.12)
    ax.set_xlabel("turns between fact and probe")
    ax.set_ylabel("probe hit rate (retrieved)")
    ax.legend(loc="lower left")
    made.append(_save(fig, out / "hit_rate_by_distance.png"))
    first = [(r["name"], (r.get("series") or {}).get("1") or []) for r in results]
    first = [(name, rows) for name, rows in first if rows]
    if first:
        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5), sharex=False)
        for axis, key in zip(axes, ("trust", "affection", "familiarity"), strict=True):
            for name, rows in first:
                axis.plot([row["turn"] for row in rows], [row[key] for row in rows], label=name, linewidth=1)
            axis.set_title(key)
            axis.set_xlabel("turn (instance 1)")
        axes[0].legend(fontsize=6)
        made.append(_save(fig, out / "relationship.png"))
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name, rows in first:
            line = ax.plot(
                [row["turn"] for row in rows],
                [row["prompt_tokens"] for row in rows],
                linewidth=1,
                label=f"{name} prompt",
            )
            ax.plot(
                [row["turn"] for row in rows],
                [row["history_tokens"] for row in rows],
                linewidth=1,
                linestyle=":",
                color=line[0].get_color(),
            )
        ax.set_yscale("log")
        ax.set_xlabel("turn (instance 1)")
        ax.set_ylabel("tokens (solid: prompt, dotted: whole history)")
        ax.legend(fontsize=6)
        made.append(_save(fig, out / "tokens.png"))
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for name, rows in first:
            ax.plot([row["turn"] for row in rows], [row["rss_mb"] for row in rows], linewidth=1, label=name)
        ax.set_xlabel("turn (instance 1; each scenario in a process of its own)")
        ax.set_ylabel("RSS (MiB)")
        ax.legend(fontsize=6)
        made.append(_save(fig, out / "rss.png"))
    return made


def _save(fig: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def write_report(
    results: Sequence[dict[str, Any]], out: Path, meta: dict[str, Any], extra_rows: Sequence[dict[str, Any]] = ()
) -> list[str]:
    """Write report.json, report.md and the plots to `out`; returns the summary lines for the terminal."""
    out.mkdir(parents=True, exist_ok=True)
    total = overall(results)
    meta = {**meta, "model_label": next((r.get("model") for r in results if r.get("model")), None)}
    made = plots(results, total, out) if results else []
    data = {
        "meta": meta,
        "summary": [*extra_rows, *goals(total)],
        "overall": total,
        "scenarios": [scenario_summary(r) for r in results],
        "plots": made,
    }
    groups = conditions_side_by_side(results)
    if groups:
        data["conditions"] = groups
    (out / "report.json").write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    text = markdown(results, total, meta, made, extra_rows)
    if groups:
        text = text.rstrip("\n") + "\n" + "\n".join(conditions_markdown(groups)) + "\n"
    curated = curated_markdown(results)
    if curated:
        text = text.rstrip("\n") + "\n" + "\n".join(curated) + "\n"
    (out / "report.md").write_text(text, encoding="utf-8")
    lines = [f"report: {out / 'report.md'} ({total['scenarios']} scenario(s), {total['turns']:,} turns)"]
    for row in [*extra_rows, *goals(total)]:
        lines.append(f"  {'ok ' if row['met'] else 'NO '} {row['figure']}: {row['measured']} (goal {row['goal']})")
    lines += [f"  FAILED {r['name']}: {r.get('error')}" for r in results if r.get("status") != "ok"]
    if groups:
        lines += ["conditions side by side (issue 30):", *conditions_console(groups)]
    for result in results:
        for row in curated_goal_rows(result):
            lines.append(
                f"  {'ok ' if row['met'] else 'NO '} {result['name']}: {row['figure']}: {row['measured']} "
                f"(goal {row['goal']})"
            )
    return lines


# --- memory conditions side by side (issue 30: does memory help?) ----------------------------------------------


def _probe_outcome(probe: dict[str, Any]) -> dict[str, Any]:
    """One probe's reply scored: used the fact (every `reply` phrase), contradicted it (a `contradicts` phrase),
    in character, and the checks it failed."""
    checks = probe.get("checks") or []
    reply_checks = [c for c in checks if c["kind"] == "reply"]
    character = probe.get("in_character") or {}
    failed = [f"{c['kind']}: {c['phrase']}" for c in checks if not c["ok"]]
    if character and not character.get("ok"):
        reasons = list(character.get("ooc_markers") or [])
        if character.get("echo"):
            reasons.append("repeats the user's message")
        if not character.get("formatted", True):
            reasons.append("no 【emotion】 format")
        why = ", ".join(reasons) or "no 【emotion】 format"
        failed.append(f"out of character: {why}")
    if probe.get("cut"):
        failed.append("cut at the turn's deadline: no reply")
    if probe.get("history_fit") is False:
        failed.append(f"history did not fit the window ({probe.get('history_missing')} user line(s) left out)")
    return {
        "instance": probe.get("instance"),
        "turn": probe.get("turn"),
        "where": probe.get("where"),
        "probe": probe.get("probe"),
        "used_fact": bool(reply_checks) and all(c["ok"] for c in reply_checks) if reply_checks else None,
        "contradicted": any(not c["ok"] for c in checks if c["kind"] == "contradicts"),
        "in_character": bool(character.get("ok")) if character else None,
        "history_fit": probe.get("history_fit"),
        "judge": probe.get("judge"),
        "failed": failed,
        "reply": probe.get("reply", ""),
    }


def condition_summary(result: dict[str, Any]) -> dict[str, Any]:
    """One condition's figures: memory use (% of probes with reply phrases whose reply used the fact),
    contradictions, in character (%), history that did not fit, the judge's mean scores, every probe."""
    outcomes = [_probe_outcome(p) for p in result.get("probes") or []]
    scored = [o for o in outcomes if o["used_fact"] is not None]
    used = sum(1 for o in scored if o["used_fact"])
    judged = [o for o in outcomes if o["in_character"] is not None]
    in_char = sum(1 for o in judged if o["in_character"])
    return {
        "condition": result.get("condition", "full"),
        "status": result.get("status"),
        "error": result.get("error"),
        "probes": len(outcomes),
        "memory_use": {"used": used, "scored": len(scored), "percent": _pct(used, len(scored))},
        "contradictions": sum(1 for o in outcomes if o["contradicted"]),
        "in_character": {"ok": in_char, "scored": len(judged), "percent": _pct(in_char, len(judged))},
        "history_not_fit": sum(1 for o in outcomes if o["history_fit"] is False),
        "cut_turns": len(result.get("cut_turns") or []),
        "capped_replies": len(result.get("capped_replies") or []),
        "echoes": _echo_summary(result.get("echoes") or []),
        "judge": _judge_summary(result.get("judge") or []),
        "failed_probes": [o for o in outcomes if o["failed"]],
        "probe_replies": outcomes,
    }


def _echo_summary(echoes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Replies that only repeated the user's input or the character's own last line (issue 30): asked once more,
    kept (no time for a second), and how many of them repeated an own line."""
    asked = sum(1 for echo in echoes if str(echo.get("status", "")).startswith("asked"))
    own = sum(1 for echo in echoes if echo.get("of") == "own line")
    return {"asked_again": asked, "kept": len(echoes) - asked, "own_line": own}


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def conditions_side_by_side(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario, its conditions' figures side by side and its goals checked (only the results of a run with
    conditions: `scenario` and `condition` set, a name `<scenario>@<condition>`)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        if "@" in str(result.get("name")) and result.get("scenario") and result.get("condition"):
            grouped.setdefault(str(result["scenario"]), []).append(result)
    out = []
    for name, group in grouped.items():
        by = {str(r["condition"]): condition_summary(r) for r in group}
        goals_set = next((r.get("goals") for r in group if r.get("goals")), None) or {}
        out.append({"scenario": name, "conditions": by, "goals": _goal_rows(goals_set, by)})
    return out


def _goal_rows(goals_set: dict[str, Any], by: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The scenario's goals: figure, goal, measured, met (None: not measured in this run, e.g. no recent)."""
    rows: list[dict[str, Any]] = []
    gain = goals_set.get("memory_use_gain_points")
    if gain is not None:
        full = (by.get("full") or {}).get("memory_use", {}).get("percent")
        recent = (by.get("recent") or {}).get("memory_use", {}).get("percent")
        if full is None or recent is None:
            rows.append(
                {
                    "figure": "memory use gain, full − recent (points)",
                    "goal": f"≥ {gain:g}",
                    "measured": "not measured (needs --conditions full,recent and probes with reply phrases)",
                    "met": None,
                }
            )
        else:
            measured = round(full - recent, 1)
            rows.append(
                {
                    "figure": "memory use gain, full − recent (points)",
                    "goal": f"≥ {gain:g}",
                    "measured": f"{measured:g} ({full:g}% − {recent:g}%)",
                    "met": measured >= gain,
                }
            )
    floor = goals_set.get("in_character_min_percent")
    if floor is not None:
        for condition, summary in by.items():
            percent = summary["in_character"]["percent"]
            rows.append(
                {
                    "figure": f"in character, {condition} (%)",
                    "goal": f"≥ {floor:g}",
                    "measured": "–" if percent is None else f"{percent:g}",
                    "met": None if percent is None else percent >= floor,
                }
            )
    most = goals_set.get("contradictions_max")
    if most is not None and "full" in by:
        found = by["full"]["contradictions"]
        rows.append(
            {"figure": "contradictions, full", "goal": f"≤ {most}", "measured": str(found), "met": found <= most}
        )
    return rows


def missed_goals(results: Sequence[dict[str, Any]]) -> list[str]:
    """Every goal a scenario file set that this run measured and missed, one line each (`eval run` exits 1)."""
    return [
        f"{group['scenario']}: {row['figure']}: {row['measured']} (goal {row['goal']})"
        for group in conditions_side_by_side(results)
        for row in group["goals"]
        if row["met"] is False
    ] + [
        f"{result['name']}: {row['figure']}: {row['measured']} (goal {row['goal']})"
        for result in results
        for row in curated_goal_rows(result)
        if row["met"] is False
    ]


# --- curated memory (issue 26) ------------------------------------------------------------------------------------

# the checks the offline scripted model can pass: what reached the prompt, not what the reply said
PROMPT_CHECKS = ("retrieved", "prompt_lacks", "order", "private", "recall", "recall_lacks")


def curated_figures(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 26's figures of one scenario: probe checks on what reached the prompt (and what NPCs recalled) passed,
    the user's lines shown twice in a prompt, private memories outside their block, memories retrieved for someone
    who did not witness them."""
    checks = [c for p in result.get("probes") or [] for c in p.get("checks") or [] if c["kind"] in PROMPT_CHECKS]
    passed = sum(1 for c in checks if c["ok"])
    witnesses = result.get("witnesses") or {}
    return {
        "probe_checks": {"passed": passed, "total": len(checks), "percent": _pct(passed, len(checks))},
        "failed_checks": [f"{c['kind']}: {c['phrase']}" for c in checks if not c["ok"]],
        "duplicates": len(result.get("duplicates") or []),
        "private_sayable": len(result.get("private_sayable") or []),
        "witness_checked": int(witnesses.get("checked", 0)),
        "unwitnessed": len(witnesses.get("unwitnessed") or []),
    }


def curated_goal_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue-26 goals the scenario file sets, checked in every run (a condition without long-term memory is
    not checked: it retrieves nothing)."""
    goals_set = result.get("goals") or {}
    if result.get("condition", "full") != "full" or not goals_set:
        return []
    figures = curated_figures(result)
    rows: list[dict[str, Any]] = []
    floor = goals_set.get("probe_checks_min_percent")
    if floor is not None:
        checks = figures["probe_checks"]
        rows.append(
            {
                "figure": "probe checks on the prompt passed (%)",
                "goal": f"≥ {floor:g}",
                "measured": f"{checks['percent']:g} ({checks['passed']}/{checks['total']})"
                if checks["percent"] is not None
                else "no check",
                "met": checks["percent"] is not None and checks["percent"] >= floor,
            }
        )
    for key, figure in (
        ("duplicates_max", "user lines shown twice in a prompt"),
        ("private_sayable_max", "private memories presented as sayable"),
        ("unwitnessed_max", "memories retrieved for one who did not witness them"),
    ):
        most = goals_set.get(key)
        if most is not None:
            found = figures[key.removesuffix("_max")]
            extra = f" of {figures['witness_checked']} checked" if key == "unwitnessed_max" else ""
            rows.append({"figure": figure, "goal": f"≤ {most}", "measured": f"{found}{extra}", "met": found <= most})
    return rows


def curated_markdown(results: Sequence[dict[str, Any]]) -> list[str]:
    """The report's section of the issue-26 goals, per scenario that sets them."""
    lines: list[str] = []
    for result in results:
        rows = curated_goal_rows(result)
        if not rows:
            continue
        if not lines:
            lines += ["", "## Curated memory (issue 26)"]
        lines += ["", f"### {result['name']}", "", "| goal | wanted | measured | met? |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {r['figure']} | {r['goal']} | {r['measured']} | {'yes' if r['met'] else '**NO**'} |" for r in rows
        ]
        failed = curated_figures(result)["failed_checks"]
        if failed:
            lines += ["", "Failed checks: " + "; ".join(failed)]
    return lines


def conditions_markdown(groups: Sequence[dict[str, Any]]) -> list[str]:
    """The report's section: conditions side by side, the goals, each failed probe with its reply."""
    if not groups:
        return []
    lines = ["", "## Does memory help? Conditions side by side", ""]
    lines.append(
        "full = PersonaLab's memory; recent = the recent-dialogue window only (no long-term memory); history = the "
        "whole dialogue in the prompt while it fits the window. Memory use: probes whose reply held every expected "
        "phrase; in character: the 【emotion】 format and no out-of-character marker."
    )
    for group in groups:
        by = group["conditions"]
        names = list(by)
        lines += ["", f"### {group['scenario']}", "", "| figure | " + " | ".join(names) + " |"]
        lines.append("| --- |" + " --- |" * len(names))

        def row(label: str, cell: Any, by: dict[str, Any] = by, names: list[str] = names) -> None:
            lines.append(f"| {label} | " + " | ".join(cell(by[n]) for n in names) + " |")  # noqa: B023 - lines is the outer list, used at once

        row("probes", lambda s: str(s["probes"]))
        row(
            "memory use",
            lambda s: (
                "–"
                if s["memory_use"]["percent"] is None
                else f"{s['memory_use']['percent']:g}% ({s['memory_use']['used']}/{s['memory_use']['scored']})"
            ),
        )
        row("contradictions", lambda s: str(s["contradictions"]))
        row(
            "in character",
            lambda s: "–" if s["in_character"]["percent"] is None else f"{s['in_character']['percent']:g}%",
        )
        row("history did not fit", lambda s: str(s["history_not_fit"]) if s["condition"] == "history" else "–")
        row("turns cut at the deadline", lambda s: str(s.get("cut_turns", 0)))
        row("replies ended at the time cap (whole sentences kept)", lambda s: str(s.get("capped_replies", 0)))
        row(
            "replies repeating the input or an own line: asked again / kept (of them own lines)",
            lambda s: "{asked_again} / {kept} ({own_line})".format(
                **{"asked_again": 0, "kept": 0, "own_line": 0, **(s.get("echoes") or {})}
            ),
        )
        row(
            "judge: memory used",
            lambda s: (
                "–" if not s["judge"] or s["judge"].get("memory_used") is None else f"{s['judge']['memory_used']}"
            ),
        )
        if group["goals"]:
            lines += ["", "| goal | wanted | measured | met? |", "| --- | --- | --- | --- |"]
            for goal in group["goals"]:
                met = {True: "yes", False: "**NO**", None: "not measured"}[goal["met"]]
                lines.append(f"| {goal['figure']} | {goal['goal']} | {goal['measured']} | {met} |")
        for name in names:
            failed = by[name]["failed_probes"]
            if by[name]["status"] != "ok":
                lines += ["", f"**{name}**: {by[name]['status']}: {by[name]['error']}"]
            if not failed:
                continue
            lines += ["", f"Failed probes, **{name}**:", ""]
            for probe in failed:
                reply = str(probe["reply"]).replace("\n", " ")
                lines.append(
                    f"- instance {probe['instance']}, turn {probe['turn']} ({probe['where']}) “{probe['probe']}”: "
                    f"{'; '.join(probe['failed'])}. Reply: “{reply[:300]}”"
                )
    return lines


def conditions_console(groups: Sequence[dict[str, Any]]) -> list[str]:
    """The console's lines: each scenario's conditions in one line, then each failed probe per condition."""
    lines = []
    for group in groups:
        cells = []
        for name, s in group["conditions"].items():
            use = s["memory_use"]["percent"]
            cells.append(
                f"{name}: memory use {'–' if use is None else f'{use:g}%'}, contradictions {s['contradictions']}, "
                f"in character {s['in_character']['percent'] if s['in_character']['percent'] is not None else '–'}%"
                + (f", history did not fit {s['history_not_fit']}" if name == "history" else "")
                + (f", turns cut at the deadline {s['cut_turns']}" if s.get("cut_turns") else "")
            )
        lines.append(f"  {group['scenario']}: " + " | ".join(cells))
        for goal in group["goals"]:
            met = {True: "ok ", False: "NO ", None: "-- "}[goal["met"]]
            lines.append(f"    {met}{goal['figure']}: {goal['measured']} (goal {goal['goal']})")
        for name, s in group["conditions"].items():
            for probe in s["failed_probes"]:
                lines.append(
                    f"    failed [{name}] instance {probe['instance']} {probe['where']} “{probe['probe']}”: "
                    f"{'; '.join(probe['failed'])}"
                )
    return lines
