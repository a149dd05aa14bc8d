"""A served run's context (issue 14): a client sets only the documented per-run knobs. Storage locations, limits
and model settings come from the server's configuration; an unknown key or a bad value is a 422 naming the field,
and nothing (run, thread, database file) is created. In-process callers still pass a whole Context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from personalab.graph.http.run_context import check_run_body
from personalab.graph.runner import create_sample_instance
from personalab.nodes.context import RUN_KNOBS, SERVER_FIELDS, Context, context_of, validate_run_context
from personalab.nodes.rules.errors import InvalidInput
from personalab.stores.checkpoints import thread_id_for
from test_served import server  # noqa: F401 - the fixture


def _post(url: str, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, timeout=60)


def test_served_run_context_refuses_server_fields_unknown_keys_and_bad_values(
    server: str,  # noqa: F811
    data_dir: Path,
    tmp_path: Path,
) -> None:
    instance_id = create_sample_instance()
    thread_id = thread_id_for(instance_id)
    assert _post(server, "/threads", {"thread_id": thread_id}).status_code == 200
    chosen = tmp_path / "x.db"
    turn = {"instance_id": instance_id, "message": "你好。"}

    refused = _post(
        server,
        f"/threads/{thread_id}/runs/wait",
        {"assistant_id": "personalab", "input": turn, "context": {"database_url": f"sqlite:///{chosen}"}},
    )
    assert refused.status_code == 422
    assert "context.database_url" in refused.json()["detail"]
    assert "PERSONALAB_DATABASE_URL" in refused.json()["detail"]
    assert not chosen.exists()
    # the same through config.configurable (LangGraph's older way to pass a context), a stateless run and an
    # assistant that would carry it into every run
    for path, body in [
        (
            f"/threads/{thread_id}/runs",
            {
                "assistant_id": "personalab",
                "input": turn,
                "config": {"configurable": {"database_url": f"sqlite:///{chosen}"}},
            },
        ),
        (
            "/runs/wait",
            {"assistant_id": "personalab", "input": turn, "context": {"database_url": f"sqlite:///{chosen}"}},
        ),
        ("/assistants", {"graph_id": "personalab", "context": {"database_url": f"sqlite:///{chosen}"}}),
    ]:
        answer = _post(server, path, body)
        assert answer.status_code == 422, (path, answer.text)
        assert "database_url" in answer.json()["detail"]
    assert not chosen.exists()

    unknown = _post(
        server,
        f"/threads/{thread_id}/runs/wait",
        {"assistant_id": "personalab", "input": turn, "context": {"speed": 1}},
    )
    assert unknown.status_code == 422 and "context.speed" in unknown.json()["detail"]
    bad = _post(
        server,
        f"/threads/{thread_id}/runs/stream",
        {"assistant_id": "personalab", "input": turn, "context": {"rag_timeout_s": "fast"}},
    )
    assert bad.status_code == 422 and "context.rag_timeout_s" in bad.json()["detail"]
    # nothing ran: no run on the thread, no turn
    runs = httpx.get(f"{server}/threads/{thread_id}/runs", timeout=30)
    assert runs.status_code == 200 and runs.json() == []

    # a documented knob works
    ok = _post(
        server,
        f"/threads/{thread_id}/runs/wait",
        {"assistant_id": "personalab", "input": turn, "context": {"rag_timeout_s": 2.0, "review_mode": "rule"}},
    )
    assert ok.status_code == 200, ok.text
    result = ok.json()
    assert "__error__" not in result and not result.get("error") and result["reply"]


def test_run_context_rules_in_process() -> None:
    """The rule itself: every Context field is a knob or a server field; a mapping context gets the knobs only,
    a whole Context (graph/runner.py, tests, evals) is used as given."""
    assert set(RUN_KNOBS) | set(SERVER_FIELDS) == {name for name in Context.__dataclass_fields__}
    assert not set(RUN_KNOBS) & set(SERVER_FIELDS)
    with pytest.raises(InvalidInput, match=r"context\.max_message_chars"):
        validate_run_context({"max_message_chars": 10**9})
    with pytest.raises(InvalidInput, match=r"context\.stall_turns"):
        validate_run_context({"stall_turns": 0})
    with pytest.raises(InvalidInput, match=r"\[1\]\.config\.configurable\.database_url"):
        check_run_body([{"context": {}}, {"config": {"configurable": {"database_url": "sqlite:///x"}}}])
    check_run_body({"config": {"configurable": {"thread_id": "t", "stall_turns": 2}}})

    class Runtime:
        context: Any = None

    runtime = Runtime()
    runtime.context = {"stall_turns": 2}
    assert context_of(runtime).stall_turns == 2
    runtime.context = {"database_url": "sqlite:///x"}
    with pytest.raises(InvalidInput, match="database_url"):
        context_of(runtime)
    whole = Context(database_url="sqlite:///y", stall_turns=5)
    runtime.context = whole
    assert context_of(runtime) is whole
