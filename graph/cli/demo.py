"""`personalab demo`: what PersonaLab does, on the embedded defaults.

Part 1 (seed 000): the seed's multi-character scene is stored and rebuilt per character.
Part 2 (seed 002): a scripted 12-turn session with the sample character, where the director's fallback and a
core-memory maintenance both happen; each turn shows the reply and its memory and plot panels.
"""

from __future__ import annotations

import argparse
from typing import Any

from personalab.graph.api.support import database_location, flush_writes
from personalab.graph.cli.args import lab
from personalab.graph.cli.output import echo

STATUS_MARK = {"completed": "✓", "in_progress": "▶", "pending": "·"}
SESSION = [
    "雷娜，我回来了。背叛我的人是谁，你有线索吗？",
    "老仓库里的账本？走，我们去看看。",
    "账本上写着“黑鸦”……这是什么人？",
    "黑鸦的据点在北边的废弃工厂吧。",
    "我们今晚就潜进去，你负责掩护。",
    "你还记得我们当年在据点守夜的事吗？",
    "工厂里的守卫换岗了，现在是机会。",
    "里面那个人……是老七？他就是叛徒？",
    "老七说他是被逼的，你怎么看？",
    "雷娜，如果是你，你会怎么选？",
    "我决定先听他把话说完。",
    "不管结果如何，谢谢你一直站在我这边。",
]


def show_builder() -> None:
    api = lab()
    instance_id, character_id = api.instances.create_sample_scene()
    echo(f"stored seed 000 example 2 as instance {instance_id}\n")
    views = [
        (f"钦灵 (role_id={character_id})", api.dialogue.memory_of(instance_id, role_id=character_id)),
        ("白小喵 (script_role_id='1')", api.dialogue.memory_of(instance_id, script_role_id="1")),
    ]
    for title, messages in views:
        echo(f"=== memory of {title}: {len(messages)} messages")
        for message in messages:
            echo(f"[{message['role']}] {message['content']}")
        echo()


def plot_panel(plot: dict[str, Any]) -> str:
    points = " ".join(f"{p['index']}{STATUS_MARK.get(p['status'], '?')}" for p in plot["story_outline"])
    current = plot["story_outline"][plot["current_plot_index"] - 1]["content"]
    return f"plot   | {points} | now {plot['current_plot_index']}: {current} | last progress: turn {plot['last_progress_turn']}"


def memory_panel(state: dict[str, Any]) -> list[str]:
    debug = state.get("debug") or {}
    rows = [f"memory | query: {debug.get('query_rewrite', {}).get('query', '')}"]
    retrieved = state.get("retrieved") or []
    scene = debug.get("retrieval", {}).get("scene", "—")
    best = f", best ({retrieved[0]['score']:.2f}): {retrieved[0]['content'][:36]}…" if retrieved else ""
    rows.append(f"       | scene {scene}; recalled {len(retrieved)} memories{best}")
    director = state.get("director_events")
    if director:
        rows.append(
            f"       | director fallback: {director['query']} → {len(director['current'])} current, "
            f"{len(director['others'])} from other play-throughs"
        )
    maintenance = debug.get("maintenance")
    if maintenance:
        rows.append(f"       | core memory maintenance: {maintenance['status']}")
    relationship = state.get("relationship") or {}
    if relationship:
        rows.append(
            f"       | relationship: trust {relationship.get('trust', 0)}, affection {relationship.get('affection', 0)}, "
            f"familiarity {relationship.get('familiarity', 0)}"
        )
    core = state.get("core_memory") or {}
    rows.append(f"       | core memory: traits {core.get('traits') or '—'}; goals {core.get('goals') or '—'}")
    return rows


def show_session() -> None:
    from personalab.graph.runner import run_turn, turn_graph

    instance = lab().instances.create_sample().id
    with turn_graph() as (graph, ctx):
        echo(f"sample instance {instance}: 雷娜 · 废土复仇记 (10 outline points)")
        for number, message in enumerate(SESSION, start=1):
            state = run_turn(graph, ctx, instance, message)
            if number == 1:
                echo(f"model: {state['model']}\n")
            echo(f"--- turn {state['turn']}")
            echo(f"you    > {message}")
            echo(f"雷娜   > {state['reply'] if not state.get('error') else '(error) ' + state['error']}")
            for row in memory_panel(state):
                echo(row)
            echo(plot_panel(state["plot_state"]))
            echo()
    flush_writes()


def run_demo(args: argparse.Namespace) -> int:
    echo(f"database: {database_location()}\n")
    if args.part in ("builder", "all"):
        echo("## Part 1 — the memory builder (seed 000)\n")
        show_builder()
    if args.part in ("session", "all"):
        echo("## Part 2 — a 12-turn role-play session (seed 002), offline scripted model\n")
        show_session()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="the memory builder on the seed's scene, then a scripted 12-turn session")
    parser.add_argument("--part", choices=["builder", "session", "all"], default="all")
    parser.set_defaults(handler=run_demo)
