"""The Redis guard of the served app (graph/http/broker.py, issue 27 "Bad input"): on Aegra with its Redis broker, a
request that starts or streams a run while Redis does not answer is a 503 naming Redis before the server stores
anything; without the broker (`langgraph dev`) the guard lets everything through. The served behaviour is
tests/test_aegra_outage.py."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from personalab.graph.http.broker import BrokerGuard, redis_unreachable


@pytest.fixture
def answering_port() -> Iterator[int]:
    """A port on 127.0.0.1 whose listener answers `+PONG` to whatever it reads."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(64)
                conn.sendall(b"+PONG\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return int(probe.getsockname()[1])


def test_redis_that_answers_is_reachable_and_a_closed_port_is_not(answering_port: int) -> None:
    assert asyncio.run(redis_unreachable(f"redis://127.0.0.1:{answering_port}/0")) is None
    assert asyncio.run(redis_unreachable(f"redis://127.0.0.1:{_closed_port()}/0")) == "connection refused"
    assert asyncio.run(redis_unreachable("unix:///tmp/redis.sock")) is None  # not checked


def _call(scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    passed: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        passed.append(scope["path"])

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(BrokerGuard(app)(scope, receive, send))
    return sent if not passed else [{"passed": passed[0]}]


def test_a_run_while_redis_is_away_is_a_503_naming_it(monkeypatch: pytest.MonkeyPatch, answering_port: int) -> None:
    run = {"type": "http", "method": "POST", "path": "/threads/t-1/runs/wait", "headers": []}
    monkeypatch.delenv("REDIS_BROKER_ENABLED", raising=False)
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{_closed_port()}/0")
    assert _call(run) == [{"passed": "/threads/t-1/runs/wait"}]  # no broker (langgraph dev): not checked
    monkeypatch.setenv("REDIS_BROKER_ENABLED", "true")
    start, body = _call(run)
    assert start["status"] == 503
    answer = json.loads(body["body"])
    assert answer["error"] == "StoreUnavailable" and "Redis" in answer["detail"] and "refused" in answer["detail"]
    # routes that need no Redis pass; a run passes once Redis answers
    assert _call({**run, "method": "GET", "path": "/instances/1"}) == [{"passed": "/instances/1"}]
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{answering_port}/0")
    assert _call(run) == [{"passed": "/threads/t-1/runs/wait"}]
