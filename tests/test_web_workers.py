"""`personalab serve --workers 2` (issue 24: the pages keep no state in a process, so any process answers any
request): started as a subprocess on a free port with its own data folder and the offline scripted model; a turn
played from the chat page's form is read back by other requests (the page and the HTTP API's history), on fresh
connections that either worker may take."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from served_app import serve_process


@contextmanager
def served_workers(root: Path, workers: int) -> Iterator[tuple[str, int]]:
    """`personalab serve --port 0 --workers N`; yields (base URL, the server's process id)."""
    with serve_process(root, "--workers", str(workers)) as (first, pid):
        found = re.search(r"(http://127\.0\.0\.1:\d+)/app", first)
        assert found, first
        yield found.group(1), pid


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _up(url: str) -> None:
    for _ in range(240):  # the workers import the app after the supervisor printed the URL
        try:
            if httpx.get(f"{url}/app/instances", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        threading.Event().wait(0.5)
    pytest.fail("personalab serve --workers 2 never answered")


def test_two_workers_serve_a_turn_played_from_a_page_and_read_by_other_requests(tmp_path: Path) -> None:
    with served_workers(tmp_path, 2) as (url, pid):
        _up(url)
        assert len(_children(pid)) >= 2  # the supervisor's worker processes
        with httpx.Client(base_url=url, timeout=300) as page:
            page.post("/app/characters", data={"name": "雷娜", "greetings": "你来了。"})
            page.post("/app/backgrounds", data={"name": "废土", "outline": ["相遇", "出发"]})
            characters = page.get("/characters").json()
            backgrounds = page.get("/backgrounds").json()
            made = page.post(
                "/app/instances",
                data={"character_id": characters[0]["id"], "background_id": backgrounds[0]["id"]},
            )
            assert made.status_code == 303, made.text
            instance = int(made.headers["location"].rstrip("/").split("/")[-1])
            with page.stream("POST", f"/app/instances/{instance}/turn", data={"message": "我们往北走吧"}) as turn:
                assert turn.headers["content-type"].startswith("text/event-stream")
                events = [line.removeprefix("event: ") for line in turn.iter_lines() if line.startswith("event: ")]
            assert "token" in events and events[-1] == "done", events
        # new connections each time: either worker may answer, and each sees the stored turn
        for _ in range(6):
            history = httpx.get(f"{url}/instances/{instance}/history", timeout=60)
            assert history.status_code == 200, history.text
            said = [line["content"] for line in history.json()["lines"]]
            assert said[0] == "你来了。" and "我们往北走吧" in said and len(said) >= 3, json.dumps(said)
            chat = httpx.get(f"{url}/app/instances/{instance}", timeout=60)
            assert "我们往北走吧" in chat.text and 'id="turn-count">1<' in chat.text
