"""A card plays by itself, in its language (issue 28): an instance made from a character alone gets an open
background from the card's scenario; the scenario and the depth prompt reach the prompt where SillyTavern puts
them; the prompt's own scaffolding is in the instance's language (English here; Chinese exactly as before); a
language that is not supported is one clear error listing those that are."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph import api
from personalab.graph.runner import run_turn, turn_graph
from personalab.nodes.context import Context
from personalab.nodes.rules import character as zh_character
from personalab.nodes.rules import prompts
from personalab.nodes.rules.card_play import DepthPrompt, depth_prompt_of
from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.prompt_assembly import RegionBudgets, assemble_prompt
from personalab.nodes.rules.prompt_catalog import EN, ZH, check_language, detect_language

FIXTURES = Path(__file__).parent / "fixtures"
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
EN_CARD = FIXTURES / "card_v2_lighthouse_en.json"
ZH_CARD = FIXTURES / "card_v2_lantern.json"
MESSAGES = ("Where am I? What happened to my boat?", "Is there anything dangerous out there?", "Thank you, Mira.")


@pytest.fixture
def url(db_url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's database, for the API and for the CLI run in-process."""
    monkeypatch.setenv("PERSONALAB_DATABASE_URL", db_url)
    return db_url


def play(url: str, instance_id: int, *messages: str, **extra: Any) -> list[dict[str, Any]]:
    with turn_graph(Context(database_url=url)) as (graph, ctx):
        return [run_turn(graph, ctx, instance_id, message, **extra) for message in messages]


def chat_after(prompt: list[dict[str, str]], index: int) -> int:
    """How many dialogue messages (user / assistant outside the head) follow `prompt[index]`."""
    return sum(1 for m in prompt[index + 1 :] if m["role"] in ("user", "assistant") and m["region"] != "head")


def test_an_english_card_plays_by_itself_from_instance_create_character_alone(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "card", "import", str(EN_CARD), "--json")
    assert code == 0, err
    imported = json.loads(out)
    assert {"scenario", "extensions.depth_prompt"} <= set(imported["used"])
    code, out, err = cli(capsys, "instance", "create", "--character", str(imported["character_id"]), "--json")
    assert code == 0, err
    instance = json.loads(out)
    assert instance["language"] == "en"  # from the card's text
    assert instance["background_name"] == instance["title"] == "Mira · scenario"
    assert instance["plot"]["total"] == 1 and instance["plot"]["current"].startswith("A stormy night. User's boat")

    states = play(url, instance["id"], *MESSAGES, user_name="Ash")
    for number, state in enumerate(states, start=1):
        assert not state.get("error"), state.get("error")
        prompt = state["prompt"]
        head = prompt[0]["content"]
        # English scaffolding, no Chinese heading anywhere around the card's text
        assert head.startswith(EN.marker.format(purpose="reply") + '\nYou are "Mira"')
        for heading in ("[Character persona]", "[Character description]", "[Scenario]"):
            assert heading in head
        # the turn number changes every turn: it opens the tail, after what the server's prompt cache keeps (issue 30)
        turn_state = next(m["content"] for m in prompt if m["region"] == "tail" and m["role"] == "system")
        assert turn_state.startswith("[Current turn] turn") and "[Current turn]" not in head
        assert "[Core memory]" in head and "[Example dialogue]" in prompt[1]["content"]
        assert not any(CJK.search(message["content"]) for message in prompt), [m["content"][:80] for m in prompt]
        assert "{{" not in json.dumps(prompt)  # {{char}} / {{user}} substituted everywhere
        # the scenario closes the character block; the open outline is not forced
        assert "[Scenario]\nA stormy night. Ash's boat has run aground on the rocks below Mira's lighthouse" in head
        assert "[Plot state]" not in head and "[PROGRESS" not in head
        assert "director" not in state["debug"]
        # the depth prompt stands 2 dialogue messages from the end
        note = "Mira never mentions the drowned village unless Ash asks about it."
        at = [i for i, m in enumerate(prompt) if m["content"] == note]
        assert len(at) == 1 and prompt[at[0]]["role"] == "system"
        assert chat_after(prompt, at[0]) == 2
        assert state["debug"]["prompt"]["depth_prompt"]["depth"] == 2
        # the reply: English, no progress markers
        assert state["reply"] and not CJK.search(state["reply"]) and "PROGRESS" not in state["reply_raw"]
        assert f"turn {number}" in turn_state
    assert states[-1]["plot_state"]["last_progress_turn"] == 0
    shown = api.PersonaLab(database_url=url).instances.get(instance["id"])
    assert shown.language == "en" and shown.turns == 3


def test_a_huge_scenario_is_cut_to_the_head_budget_and_the_debug_says_so(url: str) -> None:
    card = json.loads(EN_CARD.read_text())
    card["data"]["scenario"] = "The storm goes on and on. " * 20_000
    imported = api.PersonaLab(database_url=url).cards.import_bytes(json.dumps(card).encode(), "huge.json")
    instance = api.PersonaLab(database_url=url).instances.create({"character_id": imported.character_id})
    (state,) = play(url, instance.id, "Hello?")
    head_debug = state["debug"]["prompt"]["head"]
    (cut,) = head_debug["cut"]
    assert cut["item"] == "scenario" and 0 < cut["kept"] < cut["chars"] == len(card["data"]["scenario"].strip())
    assert "budget" in cut["reason"]
    assert not head_debug["over_budget"] and head_debug["tokens"] <= head_debug["budget"]
    assert "[Scenario]\nThe storm goes on" in state["prompt"][0]["content"]


def test_a_chinese_card_keeps_its_chinese_prompt(url: str) -> None:
    lab = api.PersonaLab(database_url=url)
    imported = lab.cards.import_bytes(ZH_CARD.read_bytes(), "lantern.json")
    background = lab.backgrounds.create({"name": "雾港", "world_setting": "雾港的夜。", "outline": ["上岸", "修船"]})
    instance = lab.instances.create({"character_id": imported.character_id, "background_id": background.id})
    assert instance.language == "zh"
    (state,) = play(url, instance.id, "这是哪里？")
    head = state["prompt"][0]["content"]
    # the instruction and the headings are the Chinese prompts, character for character
    assert head.startswith(prompts.role_play_instruction("灯守") + "\n\n" + zh_character.SYSTEM_PROMPT_LABEL)
    for heading in (prompts.HEAD_CORE_MEMORY, prompts.HEAD_PLOT_STATE, "【场景】\n雾夜，用户的船搁浅在灯塔下。"):
        assert heading in head
    assert state["prompt"][1]["content"].startswith(prompts.WORLD_SETTING)
    assert "[" + "Core memory]" not in json.dumps(state["prompt"], ensure_ascii=False)
    assert any(m["content"] == "雾很浓。" for m in state["prompt"])  # its depth prompt too
    assert CJK.search(state["reply"])


def test_the_chinese_catalog_assembles_exactly_the_prompt_as_before() -> None:
    """The Chinese catalog is the old constants, and a prompt without a card's extras is what it always was."""
    assert ZH.role_play_instruction("雷娜") == prompts.role_play_instruction("雷娜")
    assert (ZH.head_core_memory, ZH.head_plot_state, ZH.world_setting, ZH.retrieved_region) == (
        prompts.HEAD_CORE_MEMORY,
        prompts.HEAD_PLOT_STATE,
        prompts.WORLD_SETTING,
        prompts.RETRIEVED_REGION,
    )
    assert ZH.labels()["description"] == zh_character.DESCRIPTION_LABEL
    args: dict[str, Any] = {
        "system_instruction": prompts.role_play_instruction("雷娜"),
        "core_memory": {"name": "雷娜"},
        "plot_state": {
            "story_outline": [{"index": 1, "content": "出发", "status": "in_progress"}],
            "current_plot_index": 1,
        },
        "relationship": {"trust": 1},
        "world_setting": "废土",
        "recent_messages": [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "嗯。"}],
        "retrieved_blocks": [{"title": "=== 相关记忆 ===", "items": ["第1轮：出发"]}],
        "user_input": "走吧",
        "turn": 2,
    }
    assert assemble_prompt(**args).messages == assemble_prompt(**args, catalog=ZH, open_story=False).messages


def test_a_depth_prompt_stands_at_its_depth_in_the_dialogue() -> None:
    dialogue = [{"role": r, "content": f"{r} {n}"} for n, r in enumerate(["user", "assistant"] * 3)]
    base: dict[str, Any] = {
        "system_instruction": EN.role_play_instruction("Mira", open_story=True),
        "core_memory": {},
        "plot_state": {
            "story_outline": [{"index": 1, "content": "x", "status": "in_progress"}],
            "current_plot_index": 1,
        },
        "relationship": None,
        "world_setting": "",
        "recent_messages": dialogue,
        "retrieved_blocks": [],
        "user_input": "now",
        "catalog": EN,
        "open_story": True,
    }
    for depth, after in ((0, 0), (1, 1), (4, 4), (99, 7)):
        prompt = assemble_prompt(**base, depth_prompt=DepthPrompt("NOTE", depth, "system"))
        at = prompt.messages.index({"role": "system", "content": "NOTE"})
        assert sum(1 for m in prompt.messages[at + 1 :] if m["role"] != "system") == after, depth
    # a card's odd depth or role falls back to SillyTavern's defaults; an empty note is none
    assert depth_prompt_of({"depth_prompt": {"prompt": "n", "depth": "x", "role": "narrator"}}) == DepthPrompt("n", 4)
    assert depth_prompt_of({"depth_prompt": {"prompt": "  ", "depth": 1}}) is None


def test_a_huge_scenario_is_cut_at_the_rules_level_too() -> None:
    budgets = RegionBudgets(head=1500)
    prompt = assemble_prompt(
        system_instruction=EN.role_play_instruction("Mira", open_story=True),
        core_memory={},
        plot_state={"story_outline": [{"index": 1, "content": "x", "status": "in_progress"}], "current_plot_index": 1},
        relationship=None,
        world_setting="",
        recent_messages=[],
        retrieved_blocks=[],
        user_input="hi",
        budgets=budgets,
        catalog=EN,
        open_story=True,
        scenario="fog " * 5000,
    )
    assert prompt.debug["head"]["cut"][0]["item"] == "scenario"
    assert 0 < prompt.debug["head"]["cut"][0]["kept"] and prompt.debug["head"]["tokens"] <= 1500


def test_the_language_comes_from_the_card_or_is_given(url: str) -> None:
    assert detect_language("{{char}}是雾港灯塔的守灯人。", "*灯光扫过海面* 你醒了。") == "zh"
    assert detect_language("Mira keeps the lamp of North Light (北灯).") == "en"
    assert check_language(" EN ") == "en"
    lab = api.PersonaLab(database_url=url)
    imported = lab.cards.import_bytes(EN_CARD.read_bytes(), "mira.json")
    chinese = lab.instances.create({"character_id": imported.character_id, "language": "zh"})
    assert chinese.language == "zh" and chinese.background_name == "Mira · 场景"
    (state,) = play(url, chinese.id, "你好")
    assert state["prompt"][0]["content"].startswith("〔PersonaLab任务：reply〕\n你是「Mira」")
    assert "【场景】" in state["prompt"][0]["content"]


def test_an_unsupported_language_is_one_clear_error_listing_the_supported_ones(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lab = api.PersonaLab(database_url=url)
    imported = lab.cards.import_bytes(EN_CARD.read_bytes(), "mira.json")
    before = len(lab.instances.list()), len(lab.backgrounds.list())
    with pytest.raises(
        InvalidInput, match=r"instance.language: 'fr' is not a supported language \(supported: zh, en\)"
    ):
        lab.instances.create({"character_id": imported.character_id, "language": "fr"})
    code, _, err = cli(capsys, "instance", "create", "--character", str(imported.character_id), "--language", "klingon")
    assert code == 2
    assert "'klingon' is not a supported language (supported: zh, en)" in one_line(err)
    assert (len(lab.instances.list()), len(lab.backgrounds.list())) == before  # nothing half-written


def test_http_creates_an_instance_from_a_card_alone_and_refuses_a_bad_language(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    client = TestClient(app)
    imported = client.post("/cards/import", content=EN_CARD.read_bytes(), params={"name": "mira.json"})
    assert imported.status_code == 201, imported.text
    character_id = imported.json()["character_id"]
    made = client.post("/instances", json={"character_id": character_id})
    assert made.status_code in (200, 201), made.text
    assert made.json()["language"] == "en" and made.json()["background_name"] == "Mira · scenario"
    bad = client.post("/instances", json={"character_id": character_id, "language": "fr"})
    assert bad.status_code == 422
    assert "instance.language" in bad.text and "supported: zh, en" in bad.text
    changed = client.put(f"/instances/{made.json()['id']}/language", json={"language": "zh"})
    assert changed.status_code == 200 and changed.json()["language"] == "zh"
    refused = client.put(f"/instances/{made.json()['id']}/language", json={"language": "xx"})
    assert refused.status_code == 422 and "supported: zh, en" in refused.text


def test_the_web_form_creates_an_instance_from_a_card_alone_and_shows_a_bad_language(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    with TestClient(app, follow_redirects=True) as client:
        page = client.post("/app/characters/import", files={"card": ("mira.json", EN_CARD.read_bytes(), "text/json")})
        assert page.status_code == 200
        form = client.get("/app/instances")
        assert 'name="language"' in form.text and '<option value="">' in form.text
        (character,) = api.PersonaLab().characters.list()
        made = client.post("/app/instances", data={"character_id": character.id, "background_id": "", "language": ""})
        assert made.status_code == 200
        (instance,) = api.PersonaLab().instances.list()
        assert (instance.language, instance.background_name) == ("en", "Mira · scenario")
        bad = client.post("/app/instances", data={"character_id": character.id, "language": "fr"})
        assert 400 <= bad.status_code < 500 and "supported: zh, en" in bad.text
        assert len(api.PersonaLab().instances.list()) == 1


def test_the_chinese_sample_plays_with_the_prompt_it_had_before_issue_28(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped sample's 4th prompt, recorded with main before this change (fixtures/
    card_play_zh_sample_prompt.json), is what the same 4 turns send now, message for message — but for issue 30's
    move of the turn number and the relationship from the head to the tail's start (`moved_for_the_cache`)."""
    code, out, _ = cli(capsys, "instance", "create", "--sample")
    assert code == 0
    instance = out.strip()
    for message in ("雷娜，我们从哪里开始？", "去据点看看。", "你还记得那次冲突吗？"):
        assert cli(capsys, "turn", "--instance", instance, message, "--json")[0] == 0
    code, out, _ = cli(capsys, "turn", "--instance", instance, "继续前进。", "--json")
    assert code == 0
    recorded = json.loads((FIXTURES / "card_play_zh_sample_prompt.json").read_text(encoding="utf-8"))
    assert json.loads(out)["prompt"] == moved_for_the_cache(recorded)


def moved_for_the_cache(prompt: list[dict[str, str]]) -> list[dict[str, str]]:
    """Issue 30: the head's turn line and relationship block, unchanged, open the tail as one system message."""
    head = prompt[0]["content"].split("\n\n")
    moving = [part for part in head if part.startswith(("【当前轮次】", "【关系状态】"))]
    kept = {**prompt[0], "content": "\n\n".join(part for part in head if part not in moving)}
    state = {"role": "system", "region": "tail", "content": "\n\n".join(moving)}
    return [kept, *prompt[1:-1], state, prompt[-1]]


def test_an_instance_changes_its_language_from_the_next_turn_on(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    lab = api.PersonaLab(database_url=url)
    imported = lab.cards.import_bytes(EN_CARD.read_bytes(), "mira.json")
    instance = lab.instances.create({"character_id": imported.character_id})
    code, out, err = cli(capsys, "instance", "language", str(instance.id), "zh", "--json")
    assert code == 0, err
    assert json.loads(out)["language"] == "zh" == lab.instances.get(instance.id).language
    (state,) = play(url, instance.id, "你好")
    assert state["prompt"][0]["content"].startswith("〔PersonaLab任务：reply〕")
    code, _, err = cli(capsys, "instance", "language", str(instance.id), "de")
    assert code == 2 and "'de' is not a supported language (supported: zh, en)" in one_line(err)
    with pytest.raises(InvalidInput, match="supported: zh, en"):
        lab.instances.set_language(instance.id, "")
    assert lab.instances.get(instance.id).language == "zh"


def test_an_english_instance_keeps_an_english_core_memory_with_the_offline_model(sqlite_url: str) -> None:
    lab = api.PersonaLab(database_url=sqlite_url)
    imported = lab.cards.import_bytes(EN_CARD.read_bytes(), "mira.json")
    instance = lab.instances.create({"character_id": imported.character_id})
    with turn_graph(Context(database_url=sqlite_url, maintenance_every=3)) as (graph, ctx):
        states = [run_turn(graph, ctx, instance.id, message) for message in (*MESSAGES, "Good night, Mira.")]
    core = states[-1]["core_memory"]
    assert core["recent_changes"] and not CJK.search(json.dumps(core, ensure_ascii=False)), core
    assert "[Core memory]" in states[-1]["prompt"][0]["content"]
