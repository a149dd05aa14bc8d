"""Seed 000's tree, issue 13 ("the story state follows the branch"): what a turn wrote belongs to the branch of its
reply — retrieval candidates, the review's plot nodes and world-book suggestions, the memory layers' flow — and
a branch the user left neither takes room on the current one nor loses what it had; a swipe brings it back.
Real SQLite and PostgreSQL, Chroma, the real checkpointer and the offline scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from personalab.graph.api import dialogue
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.stores.background import flush_event_writes
from personalab.stores.memory import MemoryStore


def play(url: str, instance: int, *messages: str, **ctx: Any) -> list[dict[str, Any]]:
    with turn_graph(Context(database_url=url, **ctx)) as (graph, context):
        return [run_turn(graph, context, instance, message) for message in messages]


def branches(url: str) -> tuple[int, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """An instance whose turn 2 was played twice: `left` on the branch the user left (rewound), `taken` on the
    current one; `first` is turn 1, which both share."""
    instance = create_sample_instance(url)
    first, left = play(url, instance, "出发吧", "去井边看看")
    dialogue.rewind(instance, first["debug"]["reply_line_ids"][-1], database_url=url)
    (taken,) = play(url, instance, "去钟楼看看")
    flush_event_writes()
    return instance, first, left, taken


# --- 1. retrieval: the branch filter is part of the candidate selection -----------------------------------------

CURRENT = [
    "蓝色钥匙后来交给了守夜人老周保管，他把它挂在腰间",
    "老周说蓝色钥匙能打开钟楼的地下室，但那里常年积水",
    "雷娜怀疑那把蓝色钥匙是仿造的，打算找铁匠验一验",
    "铁匠认出蓝色钥匙出自北方工坊，齿纹是老手艺",
    "北方工坊的师傅三年前只打过三把蓝色钥匙，都有编号",
]


def test_a_large_abandoned_branch_does_not_crowd_the_current_branchs_memories_out(db_url: str, data_dir: Path) -> None:
    """Sixty memories of the branch the user left match the question better than the current branch's five; each
    candidate path (BM25, vector, tags) returns 50: filtered after the cut, the current branch would get none of
    its own. The paths read on past the other branch's memories, so the turn gets its k (= 3) memories, all of
    the current branch and (but for at most one other line of it) its matching memories, and the debug output names what was left out; a swipe back retrieves the other branch's."""
    instance, first, left, taken = branches(db_url)
    left_line, taken_line = left["debug"]["reply_line_ids"][-1], taken["debug"]["reply_line_ids"][-1]
    store = MemoryStore(db_url=db_url)
    abandoned = store.add_memories(
        instance,
        [{"content": f"蓝色钥匙藏在井底{i}号", "turn": 1, "line_id": left_line} for i in range(60)],
    )
    current = store.add_memories(instance, [{"content": text, "turn": 1, "line_id": taken_line} for text in CURRENT])
    k = 3
    ctx = {"rag_results": k, "recall_turns": 1}
    (asked,) = play(db_url, instance, "蓝色钥匙在哪里？", **ctx)
    retrieved = {item["id"] for item in asked["retrieved"]}
    assert len(retrieved) == k and not retrieved & {m.id for m in abandoned}
    assert len(retrieved & {m.id for m in current}) >= k - 1, [i["content"] for i in asked["retrieved"]]
    off = asked["debug"]["retrieval"]["off_branch"]
    # named once each: the other branch's memories the paths read past (and that branch's own turn and record)
    assert set(off) & {m.id for m in abandoned} and len(off) == len(set(off))
    assert not set(off) & ({m.id for m in current} | retrieved)

    dialogue.swipe(instance, left["user_line_id"], database_url=db_url)  # the branch left is current again
    (again,) = play(db_url, instance, "蓝色钥匙在哪里？", **ctx)
    back = {item["id"] for item in again["retrieved"]}
    assert len(back) == k and not back & {m.id for m in current}
    assert back & {m.id for m in abandoned}  # one of them: the rest are near-duplicates of it (seed 001 dedupe)
    assert not set(again["debug"]["retrieval"]["off_branch"]) & {m.id for m in abandoned}


# --- 2. the review's plot nodes and world-book suggestions are kept per branch -----------------------------------

TURNING_POINT = {"level": "turning_point"}


def test_a_regenerated_turns_plot_node_and_suggestion_do_not_overwrite_the_other_branchs(
    db_url: str, data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 003's review writes a plot node and a pending world-book suggestion for a turning point. Regenerating
    that turn writes the new reply's own beside them (keyed by the reply line, not the turn); the instance's
    listing shows the current branch's, and a swipe back shows the first reply's again. `suggestions list` names
    each suggestion's line; `--all-branches` lists both. Approving one puts it in the instance's world book,
    whichever branch is current."""
    from personalab.graph.cli import main
    from personalab.stores.db import session_scope
    from personalab.stores.review import approve_suggestion, list_plot_nodes, list_suggestions
    from personalab.stores.worldbook import Scope, list_worldbook

    instance = create_sample_instance(db_url)
    message = "我决定放过老七，让他加入我们。"
    with turn_graph(Context(database_url=db_url)) as (graph, context):
        run_turn(graph, context, instance, "出发吧")
        first = run_turn(graph, context, instance, message, selected_choice=TURNING_POINT)
        again = run_turn(
            graph, context, instance, message, reply_to=first["user_line_id"], selected_choice=TURNING_POINT
        )
    assert again["turn"] == first["turn"] == 2
    first_line, again_line = first["debug"]["reply_line_ids"][-1], again["debug"]["reply_line_ids"][-1]

    def listed() -> tuple[list[tuple[int, int | None]], list[tuple[int, int | None]]]:
        with session_scope(db_url) as s:
            nodes = [(n.turn, n.line_id) for n in list_plot_nodes(s, instance)]
            return nodes, [(x.turn, x.line_id) for x in list_suggestions(s, instance)]

    assert listed() == ([(2, again_line)], [(2, again_line)])
    with session_scope(db_url) as s:
        assert {n.line_id for n in list_plot_nodes(s, instance, all_branches=True)} == {first_line, again_line}
        both = list_suggestions(s, instance, all_branches=True)
        assert {x.line_id for x in both} == {first_line, again_line} and {x.status for x in both} == {"pending"}

    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    assert main(["suggestions", "list", "--instance", str(instance)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and f"turn 2 line {again_line}," in out[0]
    assert main(["suggestions", "list", "--instance", str(instance), "--all-branches"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2

    dialogue.swipe(instance, first["debug"]["reply_line_ids"][0], database_url=db_url)  # the first reply again
    assert listed() == ([(2, first_line)], [(2, first_line)])

    with session_scope(db_url) as s:  # the user's decision: the entry is the instance's, on every branch
        (pending,) = list_suggestions(s, instance)
        approved = approve_suggestion(s, pending.id)
    dialogue.swipe(instance, again["debug"]["reply_line_ids"][0], database_url=db_url)
    with session_scope(db_url) as s:
        entries = list_worldbook(s, Scope(save_id=instance), visible=True)
        assert [str(e.id) for e in entries] == [str(approved.worldbook_entry_id)]
        assert [x.status for x in list_suggestions(s, instance)] == ["pending"]  # this branch's own, still pending

    # an exported and imported copy keeps each node on its branch: the lines map to the copy's lines
    from personalab.graph import api

    copy = api.import_instance_data(api.export_instance_data(instance, database_url=db_url), database_url=db_url)
    with session_scope(db_url) as s:
        copied = list_plot_nodes(s, copy.instance.id, all_branches=True)
        (current,) = list_plot_nodes(s, copy.instance.id)
        assert len(copied) == 2 and None not in {n.line_id for n in copied}
        assert not {n.line_id for n in copied} & {first_line, again_line}
        assert current.summary == next(n.summary for n in list_plot_nodes(s, instance))


# --- 3. memory layers: capacity, decay and fading count the current branch's memories -----------------------------


def test_memories_of_an_abandoned_branch_do_not_push_the_current_branchs_out_of_the_active_layer(
    db_url: str, data_dir: Path
) -> None:
    """Thirty important memories of the branch the user left and five of the current one, all active (capacity
    10): counted together, the current branch's would be pushed out of the active layer. Maintenance sees the
    current branch (and memories without a line) only; the other branch's memories stay exactly as they were —
    not decayed, moved or faded, even many turns later — and are maintained again once a swipe brings them back."""
    from personalab.nodes.maintenance import maintain_layers

    instance, _first, left, taken = branches(db_url)
    left_line, taken_line = left["debug"]["reply_line_ids"][-1], taken["debug"]["reply_line_ids"][-1]
    store = MemoryStore(db_url=db_url)
    others = store.add_memories(
        instance,
        [{"content": f"另一条路上的记忆{i}号", "turn": 2, "importance": 0.9, "line_id": left_line} for i in range(30)],
    )
    mine = store.add_memories(
        instance,
        [{"content": f"这条路上的记忆{i}号", "turn": 2, "importance": 0.5, "line_id": taken_line} for i in range(5)],
    )

    def flow_state(ids: list[int]) -> dict[int, tuple[str, float, int, int]]:
        rows = {m.id: m for m in store.list_memories(instance)}
        return {i: (rows[i].layer, rows[i].activity, rows[i].activity_turn, rows[i].layer_since_turn) for i in ids}

    other_ids = [m.id for m in others if m.id is not None]
    before = flow_state(other_ids)

    report = maintain_layers(store, instance, 2)
    layers = {m.id: m for m in store.list_memories(instance)}
    assert all(layers[m.id].layer == "active" for m in mine), report.transitions
    assert report.off_branch >= len(others)
    assert flow_state(other_ids) == before

    maintain_layers(store, instance, 400)  # long after: this branch's memories decay and move on …
    layers = {m.id: m for m in store.list_memories(instance)}
    assert all(m.id not in layers or layers[m.id].layer != "active" for m in mine)
    assert flow_state(other_ids) == before  # … the other branch's are frozen

    dialogue.swipe(instance, left["user_line_id"], database_url=db_url)  # that branch is current again
    report = maintain_layers(store, instance, 2)
    layers = {m.id: m for m in store.list_memories(instance)}
    assert sum(layers[m.id].layer == "active" for m in others) <= 10  # its own capacity, now enforced
    assert {t.id for t in report.transitions} & {m.id for m in others}
    assert not {t.id for t in report.transitions} & {m.id for m in mine}
