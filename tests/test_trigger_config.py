"""Seed 004's trigger configuration as data (issue 23): set per scope (global, character, instance) through the
API, the CLI and HTTP; in effect field by field from the most specific scope; read by the next turn; a bad value
is refused naming the field and nothing is saved. SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli, one_line
from personalab.graph.api import library
from personalab.graph.api.facade import PersonaLab
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.trigger_config import DEFAULTS, TriggerConfig, effective, parse_trigger_config


def _world(url: str, owner: str | None = None) -> tuple[int, int]:
    character = library.create_character({"name": "雷娜"}, owner=owner, database_url=url)
    background = library.create_background({"name": "废土", "outline": ["一", "二"]}, owner=owner, database_url=url)
    instance = library.create_instance(
        {"character_id": character.id, "background_id": background.id}, owner=owner, database_url=url
    )
    return character.id, instance.id


# --- the rules ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"relevance_threshold": 1.5}, "relevance_threshold"),
        ({"relevance_threshold": "high"}, "relevance_threshold"),
        ({"semantic_similarity": "no"}, "semantic_similarity"),
        ({"max_per_type": {"goal": -1}}, "max_per_type.goal"),
        ({"max_per_type": {"dream": 2}}, "max_per_type.dream"),
        ({"inject_position": "footer"}, "inject_position"),
        ({"template": "- {body}"}, "template"),
        ({"max_total_length": -5}, "max_total_length"),
        ({"semantic": False}, "semantic"),
    ],
)
def test_a_bad_value_is_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput, match=rf"^trigger_config\.{field}: "):
        parse_trigger_config(data)


def test_the_most_specific_scope_wins_field_by_field() -> None:
    instance = TriggerConfig(semantic_similarity=False, max_per_type={"goal": 1})
    character = TriggerConfig(relevance_threshold=0.6, semantic_similarity=True, max_per_type={"trait": 0})
    value, sources = effective([("instance 3", instance), ("character 2", character), ("global", TriggerConfig())])
    assert value.semantic_similarity is False and sources["semantic_similarity"] == "instance 3"
    assert value.relevance_threshold == 0.6 and sources["relevance_threshold"] == "character 2"
    assert value.max_per_type == {"episodic": 5, "semantic": 5, "trait": 0, "goal": 1}
    assert sources["max_per_type.goal"] == "instance 3" and sources["max_per_type.episodic"] == "default"
    assert value.template == DEFAULTS.template and sources["template"] == "default"


# --- the API, on SQLite and PostgreSQL ---------------------------------------------------------------------------


def test_set_show_and_reset_per_scope(db_url: str) -> None:
    api = PersonaLab(database_url=db_url)
    character_id, instance_id = _world(db_url)
    api.trigger_config.set({"relevance_threshold": 0.4, "template": "* {content}"})
    api.trigger_config.set({"semantic_similarity": False, "max_per_type": {"goal": 1}}, character_id=character_id)
    api.trigger_config.set({"max_per_type": {"trait": 2}}, character_id=character_id)  # merged per type
    shown = api.trigger_config.set({"inject_position": "user"}, instance_id=instance_id)
    assert shown.set == {"inject_position": "user"}
    now = api.trigger_config.effective(instance_id)
    assert (
        now.effective["semantic_similarity"] is False
        and now.sources["semantic_similarity"] == f"character {character_id}"
    )
    assert now.effective["relevance_threshold"] == 0.4 and now.sources["relevance_threshold"] == "global"
    assert now.effective["inject_position"] == "user" and now.sources["inject_position"] == f"instance {instance_id}"
    assert now.effective["max_per_type"] == {"episodic": 5, "semantic": 5, "trait": 2, "goal": 1}
    assert now.effective["keyword_matching"] is True and now.sources["keyword_matching"] == "default"
    # a bad value: named, nothing saved (the other field of the same call neither)
    with pytest.raises(InvalidInput, match=r"trigger_config\.relevance_threshold"):
        api.trigger_config.set({"enabled": False, "relevance_threshold": 2}, instance_id=instance_id)
    assert api.trigger_config.get(instance_id=instance_id).set == {"inject_position": "user"}
    # null unsets one field; reset unsets the scope
    assert api.trigger_config.set({"template": None}).set == {"relevance_threshold": 0.4}
    assert api.trigger_config.reset(character_id=character_id).set == {}
    assert api.trigger_config.effective(instance_id).sources["semantic_similarity"] == "default"
    with pytest.raises(NotFound, match="instance 99999"):
        api.trigger_config.set({"enabled": False}, instance_id=99999)
    with pytest.raises(NotFound, match="character 99999"):
        api.trigger_config.get(character_id=99999)


def test_a_user_changes_only_their_own_scopes(db_url: str) -> None:
    _alice_character, alice_instance = _world(db_url, owner="alice")
    bob_character, bob_instance = _world(db_url, owner="bob")
    bob = PersonaLab(owner="bob", database_url=db_url)
    assert bob.trigger_config.set({"enabled": False}, instance_id=bob_instance).set == {"enabled": False}
    bob.trigger_config.set({"enabled": True}, character_id=bob_character)
    with pytest.raises(NotFound, match=f"instance {alice_instance}"):
        bob.trigger_config.set({"enabled": False}, instance_id=alice_instance)
    with pytest.raises(NotFound):
        bob.trigger_config.get(instance_id=alice_instance)
    with pytest.raises(InvalidInput, match="character_id or instance_id"):
        bob.trigger_config.set({"enabled": False})  # the global scope is the operator's
    assert PersonaLab(database_url=db_url).trigger_config.get(instance_id=alice_instance).set == {}


# --- the CLI and HTTP ---------------------------------------------------------------------------------------------


def test_cli_show_set_reset(capsys: pytest.CaptureFixture[str], data_dir: Path) -> None:
    _character_id, instance_id = _world(None)  # type: ignore[arg-type]
    code, out, err = cli(
        capsys,
        "trigger-config",
        "set",
        "--instance",
        str(instance_id),
        "semantic_similarity=false",
        "max_per_type.goal=2",
        "template=* {content}",
        "inject_position=user",
    )
    assert code == 0, err
    assert "semantic_similarity = false  (instance" in out and "max_per_type.goal = 2  (instance" in out
    code, out, _ = cli(capsys, "trigger-config", "show", "--instance", str(instance_id), "--json")
    assert code == 0 and '"template": "* {content}"' in out
    code, _, err = cli(capsys, "trigger-config", "set", "--instance", str(instance_id), "relevance_threshold=7")
    assert code == 2 and "trigger_config.relevance_threshold" in one_line(err)
    code, _, err = cli(capsys, "trigger-config", "set", "--instance", "99999", "enabled=false")
    assert code == 2 and "instance 99999" in one_line(err)
    code, out, _ = cli(capsys, "trigger-config", "reset", "--instance", str(instance_id))
    assert code == 0 and "reset" in out
    code, out, _ = cli(capsys, "trigger-config", "show", "--instance", str(instance_id))
    assert "semantic_similarity = true  (default)" in out


def test_http_get_put_delete(data_dir: Path) -> None:
    from fastapi.testclient import TestClient
    from personalab.graph.http.app import app

    _character_id, instance_id = _world(None)  # type: ignore[arg-type]
    http = TestClient(app)
    done = http.put(f"/trigger-config?instance_id={instance_id}", json={"semantic_similarity": False})
    assert done.status_code == 200, done.text
    assert done.json()["sources"]["semantic_similarity"] == f"instance {instance_id}"
    bad = http.put(f"/trigger-config?instance_id={instance_id}", json={"relevance_threshold": 3})
    assert bad.status_code == 422 and "relevance_threshold" in bad.json()["detail"]
    bad = http.put(f"/trigger-config?instance_id={instance_id}", json={"semantic": False})
    assert bad.status_code == 422 and "semantic" in bad.text
    assert http.get(f"/trigger-config?instance_id={instance_id}").json()["set"] == {"semantic_similarity": False}
    assert http.get("/trigger-config?instance_id=99999").status_code == 404
    assert http.delete(f"/trigger-config?instance_id={instance_id}").json()["set"] == {}


# --- a turn reads it ----------------------------------------------------------------------------------------------


def test_switching_the_semantic_strategy_off_changes_the_next_turns_injection(db_url: str) -> None:
    """A semantic world-book entry (that also fires on its keyword) is in the prompt; with the semantic strategy
    off for the instance the next turn leaves it out; reset, it is back."""
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context
    from personalab.stores.db import session_scope
    from personalab.stores.worldbook import Scope, add_worldbook_entry

    instance = create_sample_instance(db_url)
    with session_scope(db_url) as s:
        add_worldbook_entry(
            s, "灯塔的暗号是三短一长。", keywords=["灯塔"], trigger_type="semantic", scope=Scope(save_id=instance)
        )
    api = PersonaLab(database_url=db_url)

    def prompt(state: dict[str, Any]) -> str:
        return "\n".join(message["content"] for message in state["prompt"])

    with turn_graph(Context(database_url=db_url)) as (graph, ctx):
        assert "三短一长" in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        api.trigger_config.set({"semantic_similarity": False}, instance_id=instance)
        assert "三短一长" not in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        api.trigger_config.reset(instance_id=instance)
        assert "三短一长" in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))
        api.trigger_config.set({"enabled": False})  # globally: the world book fires nothing
        assert "三短一长" not in prompt(run_turn(graph, ctx, instance, "说说灯塔。"))


def test_the_configuration_goes_with_its_instance_and_character(db_url: str) -> None:
    api = PersonaLab(database_url=db_url)
    character_id, instance_id = _world(db_url)
    api.trigger_config.set({"enabled": False}, instance_id=instance_id)
    api.trigger_config.set({"template": "* {content}"}, character_id=character_id)
    library.delete_character(character_id, cascade=True, database_url=db_url)
    with pytest.raises(NotFound):
        api.trigger_config.get(instance_id=instance_id)
    with pytest.raises(NotFound):
        api.trigger_config.get(character_id=character_id)
    assert api.trigger_config.get().set == {}
