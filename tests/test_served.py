"""The graph as `langgraph dev` serves it from `langgraph.json`: two turns through the LangGraph SDK, and the
input / output / context JSON schemas LangGraph Studio builds its forms from.

The server runs in its own directory with a copy of `langgraph.json` whose relative paths point at the
repository. `langgraph dev` keeps its thread and run records in `./.langgraph_api` and loads them on the
next start; started from the repository root, a second run of this test would find the thread of
instance 1 already there (ConflictError) and would share that directory with a developer's own server.
`--no-reload`: other files of the tree change while the test runs, and a reload would cut a run off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from personalab.evals.served import graph_server
from personalab.graph.runner import create_sample_instance
from personalab.nodes.context import Context
from personalab.nodes.rules.memory_builder import format_own_line
from personalab.nodes.state import TurnInput, TurnOutput
from personalab.stores.checkpoints import open_checkpointer, thread_id_for
from personalab.stores.db import session_scope
from personalab.stores.history import get_chat_history

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def server(data_dir: Path, tmp_path: Path) -> Iterator[str]:
    """`langgraph dev` on a free port with the test's data directory; stopped (whole process group) after."""
    try:
        with graph_server(REPO, tmp_path / "server", {"PERSONALAB_DATA_DIR": str(data_dir)}) as url:
            yield url
    finally:
        # pytest shows a fixture's teardown output only when the test failed
        log = tmp_path / "server" / "server.log"
        print(f"--- langgraph dev log ({log}) ---\n{log.read_text(errors='replace') if log.exists() else ''}")


def _run(client: Any, thread_id: str, instance_id: int, message: str) -> dict[str, Any]:
    result = client.runs.wait(thread_id, "personalab", input={"instance_id": instance_id, "message": message})
    assert isinstance(result, dict) and "__error__" not in result, f"the run failed: {result}"
    assert not result.get("error"), f"the turn failed: {result.get('error')}"
    return result


def test_served_graph_plays_two_turns_and_checkpoints_them(server: str, data_dir: Path) -> None:
    from langgraph_sdk import get_sync_client

    instance_id = create_sample_instance()
    thread_id = thread_id_for(instance_id)
    client = get_sync_client(url=server, timeout=httpx.Timeout(60.0, connect=5.0))
    client.threads.create(thread_id=thread_id)

    messages = ["你好，雷娜。", "我们下一步去哪儿？"]
    first = _run(client, thread_id, instance_id, messages[0])
    _run(client, thread_id, instance_id, messages[1])

    values = client.threads.get_state(thread_id)["values"]
    assert values["turn"] == 2
    assert values["reply"] and "[PROGRESS" not in values["reply"]
    assert values["model"].startswith("scripted")
    assert values["plot_state"]["story_outline"] and values["plot_state"]["current_plot_index"] >= 1
    # the state holds the full prompt the last turn sent, each message with its region (issue 12)
    prompt = values["prompt"]
    assert prompt[0]["region"] == "head" and {m["region"] for m in prompt} <= {"head", "middle", "retrieved", "tail"}
    assert prompt[-1]["role"] == "user" and messages[1] in prompt[-1]["content"]

    # The state lives in the checkpointer langgraph.json names (the SQLite file of the data directory),
    # not in the dev server's memory: the in-process runner reads the same thread.
    with open_checkpointer() as saver:
        saved = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert saved is not None and saved.checkpoint["channel_values"]["turn"] == 2

    with session_scope() as session:
        history = get_chat_history(session, instance_id)
        lines = [(line.id, line.parent_line_id, line.attribute, line) for line in history]
    assert lines[0][1] is None
    for (previous_id, *_), (_, parent_id, _, _) in zip(lines, lines[1:], strict=False):
        assert parent_id == previous_id  # one chain, each line under the one before it
    users = [line.content for _, _, attribute, line in lines if attribute == "user"]
    assert users == messages
    second_user = next(i for i, (_, _, attribute, _) in enumerate(lines) if i > 0 and attribute == "user")
    turns = [lines[1:second_user], lines[second_user + 1 :]]
    for turn_lines, reply in zip(turns, [first["reply"], values["reply"]], strict=True):
        assert turn_lines and all(attribute == "assistant" for _, _, attribute, _ in turn_lines)
        shown = "".join(
            format_own_line(line.original_emotion, line.content, line.tts_content, line.action_content)
            for *_, line in turn_lines
        )
        assert shown == reply


def _typed(prop: dict[str, Any]) -> bool:
    """Whether a JSON-schema property says what its values are: `{}` (an `Any`) does not, nor does a union
    with such a member."""
    if any(key in prop for key in ("type", "$ref", "enum", "const")):
        return True
    options = prop.get("anyOf") or prop.get("oneOf") or prop.get("allOf")
    return bool(options) and all(_typed(option) for option in options)


def _undocumented(schema: dict[str, Any] | None, fields: Iterable[str]) -> list[str]:
    """The fields `schema` leaves out, leaves untyped or leaves without a description."""
    if not schema:
        return ["no schema at all"]
    properties = schema.get("properties") or {}
    problems = []
    for name in sorted(fields):
        prop = properties.get(name)
        if prop is None:
            problems.append(f"{name}: missing")
            continue
        if not _typed(prop):
            problems.append(f"{name}: no type")
        if not str(prop.get("description") or "").strip():
            problems.append(f"{name}: no description")
    return problems


def test_served_graph_describes_its_input_output_and_context(server: str) -> None:
    """GET /assistants/{assistant_id}/schemas, what LangGraph Studio builds its forms from: every field of
    TurnInput, TurnOutput and Context with a type and a description. (The server logs a schema it cannot build
    and serves None instead, as it did for `typing.TypedDict` states on Python 3.11.)"""
    found = httpx.post(f"{server}/assistants/search", json={"graph_id": "personalab", "limit": 1}, timeout=30)
    found.raise_for_status()
    assert found.json(), "the server has no assistant for the graph"
    response = httpx.get(f"{server}/assistants/{found.json()[0]['assistant_id']}/schemas", timeout=60)
    response.raise_for_status()
    schemas = response.json()

    fields = {
        "input_schema": TurnInput.__required_keys__ | TurnInput.__optional_keys__,
        "output_schema": TurnOutput.__required_keys__ | TurnOutput.__optional_keys__,
        "context_schema": {field.name for field in dataclasses.fields(Context)},
    }
    problems = {name: _undocumented(schemas.get(name), names) for name, names in fields.items()}
    assert problems == {name: [] for name in fields}
    # what the graph refuses a turn without, marked for the form
    assert sorted(schemas["input_schema"].get("required", [])) == ["instance_id", "message"]


def test_served_turn_inputs_live_for_one_turn(server: str, data_dir: Path) -> None:
    """Issue 16 through the server: host lines and a name given on one run are not applied again on the next,
    and an input without a message is refused instead of replaying the last one."""
    from langgraph_sdk import get_sync_client

    instance_id = create_sample_instance()
    thread_id = thread_id_for(instance_id)
    client = get_sync_client(url=server, timeout=httpx.Timeout(60.0, connect=5.0))
    client.threads.create(thread_id=thread_id)
    first = client.runs.wait(
        thread_id,
        "personalab",
        input={
            "instance_id": instance_id,
            "message": "甲",
            "lines_before": [{"attribute": "system", "content": "旁白：夜深了。"}],
            "user_name": "莱姆",
        },
    )
    assert isinstance(first, dict) and not first.get("error") and "__error__" not in first
    _run(client, thread_id, instance_id, "乙")
    # refused before the run exists (graph/http/run_context.py): a 422 naming the field, which the SDK raises
    with pytest.raises(httpx.HTTPStatusError, match="input.message: message is empty"):
        client.runs.wait(thread_id, "personalab", input={"instance_id": instance_id})
    with session_scope() as session:
        history = get_chat_history(session, instance_id)
    contents = [line.content for line in history]
    assert contents.count("旁白：夜深了。") == 1
    assert [(line.content, line.display_name) for line in history if line.attribute == "user"] == [
        ("甲", "莱姆"),
        ("乙", None),
    ]
    assert client.threads.get_state(thread_id)["values"]["turn"] == 2
