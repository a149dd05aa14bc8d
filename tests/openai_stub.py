"""A small OpenAI-compatible chat server for tests: `POST /v1/chat/completions`, plain and streamed (SSE).

Scriptable per test: queue `StubReply`s (content, streamed chunk size, a delay before answering, an HTTP status,
a malformed body); with the queue empty it answers `DEFAULT_REPLY`. It records every request body it got.
A delayed answer waits on an event that `stop()` sets, so stopping never waits for a sleeping handler.

Use the `openai_stub` fixture (import `openai_stub_fixture` into the test module): it starts the server on a free port of
127.0.0.1, points OPENAI_BASE_URL / OPENAI_API_KEY at it, clears the PERSONALAB_* LLM settings, and stops it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_REPLY = "【平静】这是测试服务器的默认回复。"
LLM_ENV = (
    "PERSONALAB_MODEL",
    "PERSONALAB_TEMPERATURE",
    "PERSONALAB_LLM_TIMEOUT",
    "PERSONALAB_LLM_MAX_RETRIES",
    "PERSONALAB_LLM",
)


@dataclass
class StubReply:
    """One scripted answer. `chunk` = characters per streamed chunk; `status` ≠ 200 answers an error body."""

    content: str = DEFAULT_REPLY
    chunk: int = 3
    delay: float = 0.0
    status: int = 200
    malformed: bool = False
    cut: bool = False  # the stream stops after the content: no finish_reason, no [DONE] (a dropped connection)


class OpenAIStub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answered = 0  # responses written completely
        self._queue: deque[StubReply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                return

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, "application/json", b'{"error": {"message": "not found"}}')
                    return
                request = json.loads(body or b"{}")
                with stub._lock:
                    stub.requests.append(request)
                    reply = stub._queue.popleft() if stub._queue else StubReply()
                if reply.delay and stub._stopping.wait(reply.delay):
                    return
                try:
                    if reply.status != 200:
                        error = {"error": {"message": f"stub error {reply.status}", "type": "server_error"}}
                        self._send(reply.status, "application/json", json.dumps(error).encode())
                    elif reply.malformed and request.get("stream"):
                        self._send(200, "text/event-stream", b"data: {this is not json\n\ndata: [DONE]\n\n")
                    elif reply.malformed:
                        self._send(200, "application/json", b"{this is not json")
                    elif request.get("stream"):
                        self._stream(request, reply)
                    else:
                        self._send(200, "application/json", json.dumps(_completion(request, reply.content)).encode())
                except (BrokenPipeError, ConnectionResetError):
                    return  # the client gave up (its timeout)
                with stub._lock:
                    stub.answered += 1

            def _send(self, status: int, kind: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, request: dict[str, Any], reply: StubReply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for event in _chunks(request, reply):
                    if reply.cut and event["choices"] and event["choices"][0]["finish_reason"]:
                        return
                    self.wfile.write(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def queue(self, *replies: StubReply | str) -> None:
        """Answer the next requests with these, in order (a string = a plain reply with that content)."""
        with self._lock:
            self._queue.extend(StubReply(r) if isinstance(r, str) else r for r in replies)

    def start(self) -> OpenAIStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()


def _completion(request: dict[str, Any], content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "stub-model"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"},
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": len(content), "total_tokens": 10 + len(content)},
    }


def _chunks(request: dict[str, Any], reply: StubReply) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = request.get("model", "stub-model")
    yield base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    text = reply.content
    for start in range(0, len(text), reply.chunk):
        piece = text[start : start + reply.chunk]
        yield base | {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
    yield base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 10, "completion_tokens": len(text), "total_tokens": 10 + len(text)}
        yield base | {"choices": [], "usage": usage}


@pytest.fixture(name="openai_stub")
def openai_stub_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIStub]:
    """A running stub, with the environment pointing the chat model at it."""
    stub = OpenAIStub().start()
    for name in LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stub")
    monkeypatch.setenv("OPENAI_BASE_URL", stub.base_url)
    yield stub
    stub.stop()
