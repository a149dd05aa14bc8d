"""Issue 26: relations between the character and the scene's other participants (another character by role_id, a
script NPC by script_role_id, a named NPC by its display name) are tracked like the user's: created when the
participant first speaks, moved by the post-turn review by seed 003's table applied to what it said or did, shown
in the prompt's tail while it is in the recent scene, branch-correct, listed by the API, the CLI and HTTP. Played
through the real graph with the offline scripted model, on SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.graph.api import library
from personalab.graph.api.facade import PersonaLab
from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.review.relations import participant_of, score_participant
from personalab.nodes.rules.types import Relation
from personalab.stores.background import flush_event_writes

LAOCHEN = {"attribute": "assistant", "display_name": "老陈", "script_role_id": "laochen"}
GUARD = {"attribute": "assistant", "display_name": "守卫"}
NARRATION = {"attribute": "assistant", "display_name": "旁白"}


def turn(instance: int, message: str, **extra: Any) -> dict[str, Any]:
    extra.setdefault("user_name", "莱姆")
    with turn_graph(Context()) as (graph, context):
        state = run_turn(graph, context, instance, message, **extra)
    flush_event_writes()
    assert not state.get("error"), state.get("error")
    return state


def tail(state: dict[str, Any]) -> str:
    """The prompt's tail state message (turn, relationship, relations) the model saw this turn."""
    return next(m["content"] for m in state["prompt"] if m["region"] == "tail" and m["role"] == "system")


def values(record: dict[str, Any]) -> tuple[int, int, int]:
    return record["trust"], record["affection"], record["familiarity"]


@pytest.fixture
def scene(data_dir: Path) -> dict[str, Any]:
    """An instance whose first turn has four other speakers: a script NPC who insults the character, a named NPC who
    thanks it, another stored character, and the narration; the user says nothing of either kind."""
    instance = create_sample_instance()
    other = library.create_character({"name": "白小喵"}).id
    first = turn(
        instance,
        "大家先坐下说吧",
        lines_before=[
            {**NARRATION, "content": "夜里，几个人挤进了雷娜的小屋。"},
            {**LAOCHEN, "content": "我讨厌你，滚开！", "action_content": "一把推开雷娜"},
            {**GUARD, "content": "谢谢你救了我，我信任你。"},
            {"attribute": "assistant", "display_name": "白小喵", "role_id": other, "content": "我来帮忙。"},
        ],
    )
    return {"instance": instance, "other": other, "first": first}


def test_an_npc_insulting_or_helping_the_character_moves_its_relation_and_not_the_users(
    scene: dict[str, Any],
) -> None:
    first, other = scene["first"], scene["other"]
    relations = first["relations"]
    assert set(relations) == {"npc:laochen", "name:守卫", f"role:{other}"}  # the narration is nobody's relation
    assert values(relations["npc:laochen"]) == (0, -1, 1)  # insulted: affection -1
    assert values(relations["name:守卫"]) == (1, 0, 1)  # helped and thanked: trust +1
    assert values(relations[f"role:{other}"]) == (0, 0, 1)
    assert relations["npc:laochen"]["name"] == "老陈" and relations["npc:laochen"]["first_turn"] == 1
    assert all(set(record) == set(Relation.__annotations__) for record in relations.values())  # the schema's shape
    assert values(first["relationship"]) == (0, 0, 1)  # the user said nothing of trust, affection or anger
    # the user's words move the user's relationship only; the NPC who speaks again is moved by its own words
    second = turn(
        scene["instance"],
        "我讨厌下雨天",
        lines_before=[{**LAOCHEN, "content": "刚才是我不对，谢谢你收留我。"}],
    )
    assert values(second["relationship"]) == (0, -1, 2)
    assert values(second["relations"]["npc:laochen"]) == (1, -1, 2)
    assert second["relations"]["npc:laochen"]["last_turn"] == 2
    assert values(second["relations"]["name:守卫"]) == (1, 0, 1)  # not in this turn: unchanged
    assert second["debug"]["review"]["relations"]["npc:laochen"]["delta"] == {
        "trust": 1,
        "affection": 0,
        "familiarity": 1,
    }


def test_the_prompt_shows_an_npcs_relation_only_while_it_is_in_the_scene(scene: dict[str, Any]) -> None:
    instance = scene["instance"]
    assert "老陈" not in tail(scene["first"])  # no relation before its first turn's review
    shown = tail(turn(instance, "你们还好吗"))
    assert "老陈 (npc:laochen)" in shown and '"affection": -1' in shown and "守卫 (name:守卫)" in shown
    for filler in ("今天风好大", "我们去看看水井", "先休息一下吧"):
        state = turn(instance, filler)
    assert "老陈" not in tail(state) and "守卫" not in tail(state)  # the scene moved on: left out
    assert "npc:laochen" in state["relations"]  # but kept
    back = turn(instance, "老陈又来了", lines_before=[{**LAOCHEN, "content": "我又回来了。"}])
    assert "老陈 (npc:laochen)" in tail(back) and "守卫" not in tail(back)


def test_a_rewind_restores_the_relations_of_the_branch_point(scene: dict[str, Any]) -> None:
    instance = scene["instance"]
    branch_point = scene["first"]["debug"]["reply_line_ids"][-1]
    later = turn(instance, "好吧", lines_before=[{**LAOCHEN, "content": "谢谢，我相信你。"}])
    assert values(later["relations"]["npc:laochen"]) == (1, -1, 2)
    api = PersonaLab()
    api.dialogue.rewind(instance, branch_point)
    listed = api.relations.list(instance)
    assert listed["turn"] == 1
    laochen = next(p for p in listed["participants"] if p["id"] == "npc:laochen")
    assert values(laochen) == (0, -1, 1)
    assert api.dialogue.story_state(instance)["story_state"]["relations"]["npc:laochen"]["affection"] == -1
    # the next turn continues from the branch point, not from the turn left behind
    again = turn(instance, "重新来过", lines_before=[{**LAOCHEN, "content": "滚！"}])
    assert values(again["relations"]["npc:laochen"]) == (0, -2, 2)


def test_a_regenerated_reply_reviews_the_same_host_lines_again(scene: dict[str, Any]) -> None:
    instance = scene["instance"]
    user_line = scene["first"]["user_line_id"]
    again = turn(instance, "", reply_to=user_line)
    assert values(again["relations"]["npc:laochen"]) == (0, -1, 1)  # from the branch point, not added twice
    assert values(again["relations"]["name:守卫"]) == (1, 0, 1)


def test_cli_http_and_web_show_the_relations_and_name_an_npc_not_in_the_scene(
    scene: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    instance = str(scene["instance"])
    code, out, err = cli(capsys, "relation", "list", "--instance", instance)
    assert code == 0, err
    assert out.splitlines()[0].startswith("user") and "老陈 (npc:laochen)" in out and "affection   -1" in out
    code, out, err = cli(capsys, "relation", "list", "--instance", instance, "--npc", "laochen", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert [p["id"] for p in shown["participants"]] == ["npc:laochen"] and shown["user"]["familiarity"] == 1
    code, out, err = cli(
        capsys,
        "turn",
        "--instance",
        instance,
        "--json",
        "--lines-before",
        json.dumps([{**GUARD, "content": "滚出去！"}], ensure_ascii=False),
        "好吧",
    )
    assert code == 0, err
    assert values(json.loads(out)["relations"]["name:守卫"]) == (1, -1, 2)  # `turn --json` shows them too
    code, _, err = cli(capsys, "relation", "list", "--instance", instance, "--npc", "xiaomiao")
    assert code == 2 and "xiaomiao" in one_line(err) and "not in the scene" in err
    http = TestClient(app)
    answer = http.get(f"/instances/{instance}/relations")
    assert answer.status_code == 200
    assert {p["id"] for p in answer.json()["participants"]} == {"npc:laochen", "name:守卫", f"role:{scene['other']}"}
    one = http.get(f"/instances/{instance}/relations", params={"npc": "守卫"}).json()
    assert [(p["id"], p["trust"]) for p in one["participants"]] == [("name:守卫", 1)]
    missing = http.get(f"/instances/{instance}/relations", params={"npc": "xiaomiao"})
    assert missing.status_code == 422 and "npc 'xiaomiao'" in missing.json()["detail"]
    assert http.get("/instances/99999/relations").status_code == 404
    assert "npc:laochen" in http.get(f"/instances/{instance}/story-state").json()["story_state"]["relations"]
    # the web app's relationship panel lists the others
    chat = http.get(f"/app/instances/{instance}").text
    panel = chat[chat.index('id="relationship-panel"') : chat.index('id="core-panel"')]
    assert 'data-participant="npc:laochen"' in panel and "老陈" in panel and "-1" in panel


def test_an_npc_id_not_in_the_scene_is_refused_through_the_api(scene: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="xiaomiao"):
        PersonaLab().relations.list(scene["instance"], npc="xiaomiao")
    fresh = create_sample_instance()
    assert PersonaLab().relations.list(fresh) == {
        "instance_id": fresh,
        "turn": 0,
        "user": {"trust": 0, "affection": 0, "familiarity": 0},
        "participants": [],
    }
    with pytest.raises(InvalidInput, match="laochen"):
        PersonaLab().relations.list(fresh, npc="laochen")  # another instance's NPC


def review_answer(participants: dict[str, dict[str, int]]) -> str:
    """A valid LLM review answer (seed 003's JSON) with the given participant deltas."""
    return json.dumps(
        {
            "skipped": False,
            "should_write_memory": False,
            "memory_value": 0.4,
            "relationship_delta": {"trust": 0, "affection": 0, "familiarity": 1},
            "participants": participants,
            "suggest_plot_node": False,
            "suggest_worldbook_update": False,
            "quality": {"character_fidelity": 0.8, "immersion": 0.7, "world_consistency": 0.9, "risk": 0.1},
            "reasons": {"relationship": "老陈动手推人"},
        },
        ensure_ascii=False,
    )


def test_in_llm_review_mode_the_model_judges_the_participants_it_names_and_the_rules_the_rest(
    data_dir: Path, openai_stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's review (the real ChatOpenAI against the stub) is shown what each participant said and did; its
    delta decides that participant's relation, one it leaves out is scored by the rules, and a participant delta
    beyond the cap makes the whole answer fall back to the rules, like the user's."""
    monkeypatch.setenv("PERSONALAB_REVIEW_MODE", "llm")
    instance = create_sample_instance()
    openai_stub.queue_for("review", review_answer({"npc:laochen": {"trust": -1, "affection": -3, "familiarity": 1}}))
    first = turn(
        instance,
        "大家先坐下说吧",
        lines_before=[{**LAOCHEN, "content": "我讨厌你，滚开！"}, {**GUARD, "content": "谢谢你，我信任你。"}],
    )
    assert first["review"]["source"] == "llm"
    assert values(first["relations"]["npc:laochen"]) == (-1, -3, 1), "the model's judgement"
    assert values(first["relations"]["name:守卫"]) == (1, 0, 1), "left out by the model: the rule table"
    changes = first["debug"]["review"]["relations"]
    assert (changes["npc:laochen"]["source"], changes["name:守卫"]["source"]) == ("llm", "rule")
    (asked,) = [r for r in openai_stub.requests if "〔PersonaLab任务：review〕" in r["messages"][0]["content"]]
    shown = asked["messages"][-1]["content"]
    assert "npc:laochen" in shown and "我讨厌你，滚开！" in shown and "name:守卫" in shown
    # beyond ±llm_max_abs_delta: not trusted at all, the rules decide the user's and every participant's relation
    openai_stub.queue_for("review", review_answer({"npc:laochen": {"trust": 0, "affection": -9, "familiarity": 1}}))
    second = turn(instance, "别吵了", lines_before=[{**LAOCHEN, "content": "我讨厌你，滚开！"}])
    assert "participants.npc:laochen.affection -9" in second["review"]["fallback_reason"]
    assert values(second["relations"]["npc:laochen"]) == (-1, -4, 2), "the rule table: affection -1, familiarity +1"


def test_who_is_a_participant_and_what_moves_it() -> None:
    assert participant_of({**LAOCHEN, "content": "x"}, 1) == ("npc:laochen", "老陈")
    assert participant_of({"attribute": "assistant", "role_id": 1, "content": "x"}, 1) is None  # the character
    assert participant_of({"attribute": "assistant", "role_id": 2, "display_name": "钦灵"}, 1) == ("role:2", "钦灵")
    assert participant_of({**NARRATION, "content": "x"}, 1) is None
    assert participant_of({"attribute": "assistant", "display_name": "Narrator"}, 1) is None
    assert participant_of({"attribute": "user", "display_name": "莱姆"}, 1) is None
    assert participant_of({"attribute": "system", "script_role_id": "laochen"}, 1) is None
    assert participant_of({"attribute": "assistant", "display_name": "雷娜"}, None, "雷娜") is None
    delta, reason = score_participant("我讨厌你，但还是谢谢你")
    assert delta.to_dict() == {"trust": 1, "affection": -1, "familiarity": 1} and "讨厌" in reason
