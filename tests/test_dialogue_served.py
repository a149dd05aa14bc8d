"""The dialogue over the LangGraph server (`langgraph dev`, issue 13): what a streaming client reads (the `messages`
and `events` modes) is the reply only, without `[PROGRESS]` markers and without the query rewrite's tokens; the
dialogue routes of the mounted HTTP app; a run on another instance's thread is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from personalab.graph.runner import create_sample_instance
from personalab.stores.checkpoints import thread_id_for
from test_served import server  # noqa: F401 - the fixture


def _content(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return content or ""


def test_stream_modes_carry_the_reply_without_markers_or_the_rewrite(server: str, data_dir: Path) -> None:  # noqa: F811
    from langgraph_sdk import get_sync_client

    instance = create_sample_instance()
    thread = thread_id_for(instance)
    client = get_sync_client(url=server, timeout=httpx.Timeout(120.0, connect=5.0))
    client.threads.create(thread_id=thread)
    # the scripted model opens turn 1 with [PROGRESS:1:in_progress] and ends turn 2 with [PROGRESS:1:completed]
    for message in ("你好，雷娜。", "我们出发吧。"):
        tokens: list[tuple[str, str]] = []  # (node, text) of the messages mode
        events: list[dict[str, Any]] = []
        for part in client.runs.stream(
            thread,
            "personalab",
            input={"instance_id": instance, "message": message},
            stream_mode=["messages-tuple", "events"],
        ):
            if part.event == "messages":
                chunk, metadata = part.data
                tokens.append((metadata.get("langgraph_node", ""), _content(chunk)))
            elif part.event == "events" and part.data.get("event") == "on_chat_model_stream":
                events.append(part.data)
        state = client.threads.get_state(thread)["values"]
        assert not state.get("error")
        streamed = "".join(text for _node, text in tokens)
        assert tokens and {node for node, _text in tokens} == {"generate"}  # no query-rewrite tokens
        assert "PROGRESS" not in streamed
        assert streamed.replace(" ", "") == state["reply"].replace(" ", "")
        shown = [event for event in events if "nostream" not in (event.get("tags") or [])]
        assert shown and {event["metadata"]["langgraph_node"] for event in shown} == {"generate"}
        assert all("PROGRESS" not in _content(event["data"]["chunk"]) for event in events)
    plot = client.threads.get_state(thread)["values"]["plot_state"]
    assert plot["story_outline"][0]["status"] == "completed"  # the markers still moved the story


def test_dialogue_routes_and_runs_on_the_instance_thread(server: str, data_dir: Path) -> None:  # noqa: F811
    from langgraph_sdk import get_sync_client

    instance, other = create_sample_instance(), create_sample_instance()
    thread = thread_id_for(instance)
    client = get_sync_client(url=server, timeout=httpx.Timeout(120.0, connect=5.0))
    client.threads.create(thread_id=thread)
    first = client.runs.wait(thread, "personalab", input={"instance_id": instance, "message": "你好"})
    assert isinstance(first, dict) and not first.get("error")

    # a turn of another instance on this thread: refused, nothing written
    with pytest.raises(Exception, match=f"is not the thread of instance {other}"):
        client.runs.wait(thread, "personalab", input={"instance_id": other, "message": "串线"})

    http = httpx.Client(base_url=server, timeout=120.0)
    assert http.get(f"/instances/{other}/history").json()["total"] == 0
    page = http.get(f"/instances/{instance}/history", params={"limit": 100}).json()
    assert page["lines"][0]["attribute"] == "user" and page["lines"][0]["content"] == "你好"

    regen = http.post(f"/instances/{instance}/regenerate", json={})
    assert regen.status_code == 200, regen.text
    assert regen.json()["turn"] == 1 and not regen.json().get("error")
    first_reply = first["debug"]["reply_line_ids"][0]
    siblings = http.get(f"/instances/{instance}/lines/{first_reply}/siblings").json()["siblings"]
    assert [item["on_branch"] for item in siblings] == [False, True]
    assert client.threads.get_state(thread)["values"]["turn"] == 1  # the run was on the instance's thread

    swiped = http.post(f"/instances/{instance}/swipe", json={"line_id": first_reply}).json()
    assert swiped["leaf"] == first["debug"]["reply_line_ids"][-1] and swiped["turn"] == 1
    edited = http.post(f"/instances/{instance}/edit", json={"line_id": page["lines"][0]["id"], "text": "晚上好"})
    assert edited.status_code == 200 and edited.json()["turn"] == 1
    users = [line["content"] for line in http.get(f"/instances/{instance}/history").json()["lines"]]
    assert "晚上好" in users and "你好" not in users

    missing = http.post(f"/instances/{instance}/swipe", json={"line_id": 999999})
    assert missing.status_code == 404 and "line 999999" in missing.json()["detail"]
    foreign = http.post(f"/instances/{other}/rewind", json={"line_id": first_reply})
    assert foreign.status_code == 422 and f"not a line of instance {other}" in foreign.json()["detail"]
    assert http.post(f"/instances/{instance}/sessions").status_code == 201
    assert len(http.get(f"/instances/{instance}/sessions").json()) == 2
    paths = http.get("/openapi.json").json()["paths"]
    assert {"/instances/{instance_id}/history", "/instances/{instance_id}/regenerate"} <= set(paths)
