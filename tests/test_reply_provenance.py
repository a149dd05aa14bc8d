"""What fed each reply (issue 23): stored with the reply's lines, read back after a restart (a new engine) through
`api.replies`, the CLI (`personalab reply why`) and HTTP (`GET /lines/{id}/provenance`); every branch keeps its
replies' provenance. Offline scripted model, SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph.api import dialogue
from personalab.graph.api.facade import PersonaLab
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import NotFound
from personalab.stores.background import flush_event_writes
from personalab.stores.db import dispose_engines, session_scope
from personalab.stores.memory import MemoryStore
from personalab.stores.saves import get_save
from personalab.stores.worldbook import GLOBAL, Scope, add_knowledge, add_worldbook_entry


def turns(url: str, instance: int, *messages: str) -> list[dict[str, Any]]:
    states = []
    with turn_graph(Context(database_url=url)) as (graph, context):
        for message in messages:
            states.append(run_turn(graph, context, instance, message))
    flush_event_writes()
    return states


@pytest.fixture
def played(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    instance = create_sample_instance(db_url)
    memory = MemoryStore(db_url=db_url).add_memory(
        instance, "莱姆把金色怀表藏在了旧仓库的地板下", importance=0.9, turn=0
    )
    with session_scope(db_url) as s:
        role_id = get_save(s, instance).role_id
        knowledge = add_knowledge(s, "地点", "旧仓库在据点东侧，夜里无人看守", keywords=["旧仓库"], importance=0.8)
        entry = add_worldbook_entry(
            s, "黑鸦是叛徒的代号，只在夜里出没", keywords=["黑鸦"], scope=Scope(role_id=role_id)
        )
        add_worldbook_entry(s, "（废土的夜很冷）", keywords=["夜"], scope=GLOBAL)
    first, second = turns(db_url, instance, "黑鸦把怀表藏在旧仓库哪里了？", "然后呢？")
    return {
        "instance": instance,
        "memory": memory.id,
        "knowledge": getattr(knowledge, "id", None) or knowledge["id"],
        "entry": getattr(entry, "id", None) or entry["id"],
        "first": first,
        "second": second,
        "url": db_url,
    }


def test_provenance_survives_a_restart_with_scores_reasons_and_cuts(played: dict[str, Any]) -> None:
    first = played["first"]
    reply_lines = first["debug"]["reply_line_ids"]
    dispose_engines()  # as after a restart: nothing but the database
    api = PersonaLab(database_url=played["url"])
    found = api.replies.provenance(reply_lines[0])
    assert found.line_ids == reply_lines and found.turn == first["turn"] and found.on_current_branch
    record = found.record
    assert record["message"] == "黑鸦把怀表藏在旧仓库哪里了？" and record["query"]
    (memory,) = [m for m in record["memories"] if m["id"] == played["memory"]]
    assert memory["in_prompt"] and memory["score"] > 0 and memory["trigger"] and memory["breakdown"]["paths"]
    assert memory["kind"] == "episodic" and memory["content"].startswith("莱姆把金色怀表")
    (entry,) = [e for e in record["worldbook"] if e["content"].startswith("黑鸦是叛徒")]
    assert entry["trigger"] == "keyword" and entry["reason"] and entry["in_prompt"]
    assert any(k["content"].startswith("旧仓库在据点东侧") and k["in_prompt"] for k in record["knowledge"])
    assert record["recall_window"]["lines"] >= 1 and "middle" in record["regions"]
    assert isinstance(record["cut"], list)
    # the same record from any line of the reply, and the second reply has its own
    assert api.replies.provenance(reply_lines[-1]).reply_line_id == found.reply_line_id
    second_lines = played["second"]["debug"]["reply_line_ids"]
    assert api.replies.provenance(second_lines[0]).record["message"] == "然后呢？"


def test_each_branch_keeps_its_replies_provenance(played: dict[str, Any]) -> None:
    url, instance = played["url"], played["instance"]
    first_reply = played["first"]["debug"]["reply_line_ids"][-1]
    second_reply = played["second"]["debug"]["reply_line_ids"][-1]
    dialogue.rewind(instance, first_reply, database_url=url)
    (third,) = turns(url, instance, "换个话题吧。")
    third_reply = third["debug"]["reply_line_ids"][-1]
    dispose_engines()
    replies = PersonaLab(database_url=url).replies
    left = replies.provenance(second_reply)
    assert left.record["message"] == "然后呢？" and not left.on_current_branch
    here = replies.provenance(third_reply)
    assert here.record["message"] == "换个话题吧。" and here.on_current_branch
    assert replies.provenance(first_reply).on_current_branch


def test_a_user_line_an_unknown_line_and_another_users_line_are_not_found(played: dict[str, Any]) -> None:
    url = played["url"]
    user_line = played["first"]["user_line_id"]
    replies = PersonaLab(database_url=url).replies
    with pytest.raises(NotFound, match=f"line {user_line} is a user line, not a reply"):
        replies.provenance(user_line)
    with pytest.raises(NotFound, match="line 987654 does not exist"):
        replies.provenance(987654)
    with session_scope(url) as s:
        get_save(s, played["instance"]).owner = "bo"
    reply = played["first"]["debug"]["reply_line_ids"][0]
    with pytest.raises(NotFound, match=f"line {reply} does not exist"):
        PersonaLab(owner="ana", database_url=url).replies.provenance(reply)
    assert PersonaLab(owner="bo", database_url=url).replies.provenance(reply).line_ids


def test_cli_reply_why(played: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    reply = played["first"]["debug"]["reply_line_ids"][0]
    code, out, _ = cli(capsys, "reply", "why", str(reply))
    assert code == 0
    assert f"memory #{played['memory']}" in out and "in prompt" in out and "world book" in out and "knowledge" in out
    code, out, _ = cli(capsys, "reply", "why", str(reply), "--json")
    assert code == 0 and json.loads(out)["record"]["memories"]
    code, _, err = cli(capsys, "reply", "why", str(played["first"]["user_line_id"]))
    assert code == 2 and "not a reply" in one_line(err)
    code, _, err = cli(capsys, "reply", "why", "abc")
    assert code == 2 and "'abc'" in one_line(err)
