"""A small OpenAI-compatible chat server for tests: `POST /v1/chat/completions`, plain and streamed (SSE).

Scriptable per test: queue `StubReply`s (content, streamed chunk size, a delay before answering, a delay between
streamed chunks, an HTTP status, a malformed body); with the queue empty it answers `DEFAULT_REPLY`. It records
every request body it got. A delayed answer waits on an event that `stop()` sets, so stopping never waits for a
sleeping handler.

Like a real server it honours the request's `max_tokens` / `max_completion_tokens` (one character = one token:
a longer answer is cut there with finish_reason `length`), and with `context_window` set it refuses, as llama.cpp's
server does, a request whose prompt (langchain-core's approximate counter at `chars_per_token`, or with `text_tokens`
set the ChatML-rendered prompt in that tokenizer's tokens) plus its max tokens exceed the window (HTTP 400, "Requested tokens (N) exceed context window of W").

With `reader = True` (issue 30) it is a deterministic extractive reader, a stand-in for a model that reads its
prompt: a reply request (any request without another purpose's marker) is answered with the prompt's statement
that shares the most words with the latest user message (CJK character pairs, English words; questions are never
answers; ties go to the later statement), as `【平静】<statement>`; with nothing sharing at least `READER_MIN_OVERLAP`
it answers that it does not remember. A query-rewrite request gets the user's latest input back; other purposes the
default reply. So a fact the prompt holds is answered, and a fact it lacks is not.

With `slow = SlowServer(prompt_per_s, gen_per_s)` set (issue 30) it is a slow CPU server as llama.cpp's is: ONE
request at a time (the next waits for the running one: `SlowServer.slot`), the prompt evaluated at `prompt_per_s`
tokens a second and the answer written at `gen_per_s`, a prompt cache of the last request's tokens (its prompt and
what it wrote) of which the next request reuses the longest common prefix, and a request whose client closes the
connection (while it waits, while its prompt is evaluated, while it writes) is cancelled at once. A token here is
`chars_per_token` characters of the ChatML-rendered prompt (the answer: one character a token, as above). The
streamed answer's last chunk reports, as llama.cpp's server does, `usage` with `prompt_tokens_details.cached_tokens`
and `timings` (`prompt_n` evaluated, `cache_n` reused, `prompt_ms`, `predicted_n`, `predicted_ms`); every request
leaves a `SlowRecord` in `SlowServer.log` (purpose, tokens, reuse, waited, cancelled). As llama-cpp-python's
server: `reports_usage=False` (no usage, no timings) and `evaluates_abandoned=True` (a prompt whose client has gone
is evaluated to its end before the next request starts).

Use the `openai_stub` fixture (import `openai_stub_fixture` into the test module): it starts the server on a free port of
127.0.0.1, points OPENAI_BASE_URL / OPENAI_API_KEY at it, clears the PERSONALAB_* LLM settings, and stops it.
"""

from __future__ import annotations

import json
import math
import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

DEFAULT_REPLY = "【平静】测试服务器的回复。"  # under MIN_REPEAT_CHARS: said every turn, it is no repeat to ask again
READER_MIN_OVERLAP = 2
READER_UNKNOWN = "【平静】我不记得了。"
_PURPOSE_RE = re.compile(r"〔PersonaLab(?:任务：| task: )([a-z_]+)〕")  # the Chinese or the English marker
_STATEMENT_RE = re.compile(r"[^。！？!?\n]+[。！？!?]?")
_CJK_RE = re.compile(r"[\u4e00-\u9fff]")
_WORD_RE = re.compile(r"[a-z][a-z']+")
_STOPWORDS = frozenset(
    "what who where when which how the and you your yours my mine our was were are is did does do that this "
    "with for have has had remember recall tell me again about".split()
)


def _features(text: str) -> set[str]:
    """CJK character pairs and English content words (possessive 's dropped)."""
    chars = [c for c in text if _CJK_RE.match(c)]
    pairs = {a + b for a, b in zip(chars, chars[1:], strict=False)}
    words = {w.removesuffix("'s") for w in _WORD_RE.findall(text.lower())}
    return pairs | {w for w in words if len(w) > 2 and w not in _STOPWORDS}


def reader_answer(request: dict[str, Any]) -> str:
    """The extractive reader's answer to a chat request (see the module doc)."""
    messages = [m for m in request.get("messages") or [] if isinstance(m.get("content"), str)]
    system = " ".join(m["content"] for m in messages if m.get("role") == "system")
    purpose = _PURPOSE_RE.search(system)
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        return READER_UNKNOWN
    question = messages[users[-1]]["content"]
    if "评审" in system and "【角色的回复】" in question:  # the eval run's judge (evals/prompts.py)
        recalled = question.split("【检索到的记忆】", 1)[-1].split("【用户的提问】", 1)[0]
        reply = question.split("【角色的回复】", 1)[-1]
        used = int(len(_features(recalled) & _features(reply)) >= READER_MIN_OVERLAP)
        return json.dumps({"persona_consistency": 1, "memory_used": used, "reason": "stub reader"})
    if purpose and purpose.group(1) == "query_rewrite":
        latest = question.split("【用户最新输入】", 1)[-1].strip().splitlines()
        return latest[0] if latest else question
    if purpose and purpose.group(1) != "reply":
        return DEFAULT_REPLY
    asked = _features(question.splitlines()[-1] if question.strip() else question)
    best, best_score = "", 0
    for index, message in enumerate(messages):
        if index == users[-1]:
            continue
        for statement in _STATEMENT_RE.findall(message["content"]):
            statement = statement.strip()
            if not statement or statement.endswith(("?", "？")):
                continue
            score = len(asked & _features(statement))
            if score >= best_score and score > 0:
                best, best_score = statement, score
    if best_score < READER_MIN_OVERLAP:
        return READER_UNKNOWN
    return "【平静】" + re.sub(r"^\s*【[^】]*】", "", best).strip()


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
    chunk_delay: float = 0.0  # seconds before each streamed chunk of content (a slow model)
    # seconds of SSE keep-alive comments (`: ping`, every 0.2 s) before the first chunk, as llama-cpp-python's
    # server sends while it evaluates a long prompt: the client's per-read timeout never fires meanwhile
    ping_for: float = 0.0


@dataclass
class SlowRecord:
    """What the slow server did with one request."""

    purpose: str
    prompt_tokens: int
    cached: int = 0  # tokens of the prompt reused from the cache (not evaluated)
    evaluated: int = 0
    written: int = 0
    waited_s: float = 0.0  # queued behind another request
    cancelled: str = ""  # "", "waiting", "prompt", "writing": where the client's close found it
    started: float = 0.0
    ended: float = 0.0


@dataclass
class SlowServer:
    """A slow one-request-at-a-time CPU server with a prompt cache (module doc)."""

    prompt_per_s: float
    gen_per_s: float
    slot: threading.Lock = field(default_factory=threading.Lock)
    # (prompt_per_s, gen_per_s) of a request naming this model: one server, several models' speeds
    per_model: dict[str, tuple[float, float]] = field(default_factory=dict)
    cache: str = ""  # the rendered text of the last request's tokens
    # False: no `usage` nor `timings` in a stream, whatever the request asks (llama-cpp-python's server)
    reports_usage: bool = True
    # True: a request given up while its prompt is evaluated is evaluated to the end first, the next request
    # waiting (llama-cpp-python's server checks its client only between written tokens)
    evaluates_abandoned: bool = False
    log: list[SlowRecord] = field(default_factory=list)

    def reuse(self, from_turn: int = 1, purpose: str = "reply") -> float:
        """Share of `purpose`'s prompt tokens reused from the cache, over its requests from the `from_turn`-th on."""
        records = [r for r in self.log if r.purpose == purpose][from_turn:]
        total = sum(r.prompt_tokens for r in records)
        return sum(r.cached for r in records) / total if total else 0.0


def _rendered(request: dict[str, Any]) -> str:
    """The prompt as a ChatML server sees it."""
    messages = request.get("messages") or []
    text = "".join(f"<|im_start|>{m.get('role')}\n{m.get('content')}<|im_end|>\n" for m in messages)
    return text + "<|im_start|>assistant\n"


def _common(a: str, b: str) -> int:
    size = min(len(a), len(b))
    for index in range(size):
        if a[index] != b[index]:
            return index
    return size


def _client_gone(connection: socket.socket) -> bool:
    """The client closed its side (a readable socket with nothing to read), as llama.cpp's server checks."""
    try:
        # poll, not select: a long test process holds descriptors past select()'s 1024 limit
        poller = select.poll()
        poller.register(connection, select.POLLIN)
        readable = poller.poll(0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class OpenAIStub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answered = 0  # responses written completely
        self.pinging = 0  # streams still in their `ping_for` phase (no chunk sent yet)
        self.context_window: int | None = None  # tokens; None: any prompt is accepted
        self.chars_per_token = 1.5
        # the model's tokenizer (a text -> token count function): the prompt is then counted as llama.cpp's server
        # does, the chat template (ChatML) rendered and tokenized, instead of approximately
        self.text_tokens: Callable[[str], int] | None = None
        self.reader = False  # the extractive reader (issue 30) instead of DEFAULT_REPLY
        self.slow: SlowServer | None = None  # a slow CPU server (issue 30; module doc)
        self._queue: deque[StubReply] = deque()
        # replies kept for one purpose's requests (its marker in the system prompt, nodes/rules/prompts.py), whatever
        # the order of the calls: a cold process may give up a call (its deadline share) before it is sent
        self._by_purpose: dict[str, deque[StubReply]] = {}
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
                    reply = stub._next_reply(request)
                if reply.delay and stub._stopping.wait(reply.delay):
                    return
                cap = request.get("max_tokens") or request.get("max_completion_tokens")
                requested = _prompt_tokens(request, stub.chars_per_token, stub.text_tokens) + int(cap or 0)
                try:
                    if stub.context_window is not None and requested > stub.context_window:
                        message = f"Requested tokens ({requested}) exceed context window of {stub.context_window}"
                        error = {"error": {"message": message, "type": "invalid_request_error"}}
                        self._send(400, "application/json", json.dumps(error).encode())
                    elif reply.status != 200:
                        error = {"error": {"message": f"stub error {reply.status}", "type": "server_error"}}
                        self._send(reply.status, "application/json", json.dumps(error).encode())
                    elif reply.malformed and request.get("stream"):
                        self._send(200, "text/event-stream", b"data: {this is not json\n\ndata: [DONE]\n\n")
                    elif reply.malformed:
                        self._send(200, "application/json", b"{this is not json")
                    elif stub.slow is not None:
                        self._slow(request, reply, stub.slow)
                        return
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

            def _slow(self, request: dict[str, Any], reply: StubReply, slow: SlowServer) -> None:
                """One request on the slow server: queued, prompt evaluated past the cached prefix, written."""
                system = " ".join(str(m.get("content")) for m in request.get("messages") or [] if m["role"] == "system")
                purpose = _PURPOSE_RE.search(system)
                prompt = _rendered(request)
                per_token = stub.chars_per_token
                record = SlowRecord(purpose.group(1) if purpose else "", math.ceil(len(prompt) / per_token))
                queued = time.monotonic()
                while not slow.slot.acquire(timeout=0.02):
                    if _client_gone(self.connection) or stub._stopping.is_set():
                        record.cancelled = "waiting"
                        slow.log.append(record)
                        return
                try:
                    record.started = time.monotonic()
                    record.waited_s = record.started - queued
                    record.cached = min(record.prompt_tokens - 1, int(_common(prompt, slow.cache) / per_token))
                    record.evaluated = record.prompt_tokens - record.cached
                    slow.cache = prompt[: int(record.cached * per_token)]  # the slot keeps its reused prefix
                    self._slow_answer(request, reply, slow, record, prompt)
                finally:
                    record.ended = time.monotonic()
                    slow.log.append(record)
                    slow.slot.release()

            def _slow_answer(
                self, request: dict[str, Any], reply: StubReply, slow: SlowServer, record: SlowRecord, prompt: str
            ) -> None:
                per_token = stub.chars_per_token
                prompt_per_s, gen_per_s = slow.per_model.get(
                    request.get("model", ""), (slow.prompt_per_s, slow.gen_per_s)
                )
                done = 0.0
                tick = 0.02
                gone = False
                while done < record.evaluated:  # prompt evaluation, in batches, watching the client
                    if stub._stopping.wait(tick) or (not gone and _client_gone(self.connection)):
                        record.cancelled = "prompt"
                        if not slow.evaluates_abandoned or stub._stopping.is_set():
                            slow.cache = prompt[: int((record.cached + done) * per_token)]
                            return
                        gone = True  # llama-cpp-python: the evaluation runs to its end, holding the slot
                    done += prompt_per_s * tick
                slow.cache = prompt
                if gone:
                    return
                prompt_ms = record.evaluated / prompt_per_s * 1000
                text, finish = _capped(request, reply.content)
                usage = {
                    "prompt_tokens": record.prompt_tokens,
                    "completion_tokens": len(text),
                    "total_tokens": record.prompt_tokens + len(text),
                    "prompt_tokens_details": {"cached_tokens": record.cached},
                }
                timings = {
                    "cache_n": record.cached,
                    "prompt_n": record.evaluated,
                    "prompt_ms": round(prompt_ms, 1),
                    "prompt_per_second": prompt_per_s,
                    "predicted_n": len(text),
                    "predicted_ms": round(len(text) / gen_per_s * 1000, 1),
                    "predicted_per_second": gen_per_s,
                }
                base = {"id": "chatcmpl-stub", "created": int(time.time()), "model": request.get("model", "stub")}
                if not request.get("stream"):
                    if stub._stopping.wait(len(text) / gen_per_s) or _client_gone(self.connection):
                        record.cancelled = "writing"
                        return
                    slow.cache = prompt + text
                    record.written = len(text)
                    body = _completion(request, reply.content) | {"usage": usage, "timings": timings}
                    self._send(200, "application/json", json.dumps(body, ensure_ascii=False).encode())
                    with stub._lock:
                        stub.answered += 1
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                chunk = {**base, "object": "chat.completion.chunk"}
                try:
                    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    self._event(chunk | {"choices": [first]})
                    for start in range(0, len(text), reply.chunk):
                        piece = text[start : start + reply.chunk]
                        if stub._stopping.wait(len(piece) / gen_per_s) or _client_gone(self.connection):
                            record.cancelled = "writing"
                            return
                        self._event(
                            chunk | {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                        )
                        record.written += len(piece)
                        slow.cache = prompt + text[: record.written]
                    last = {"index": 0, "delta": {}, "finish_reason": finish}
                    self._event(chunk | {"choices": [last]} | ({"timings": timings} if slow.reports_usage else {}))
                    if slow.reports_usage and (request.get("stream_options") or {}).get("include_usage"):
                        self._event(chunk | {"choices": [], "usage": usage, "timings": timings})
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    record.cancelled = "writing"
                    return
                with stub._lock:
                    stub.answered += 1

            def _event(self, event: dict[str, Any]) -> None:
                self.wfile.write(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
                self.wfile.flush()

            def _stream(self, request: dict[str, Any], reply: StubReply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                pinging_until = time.monotonic() + reply.ping_for
                with stub._lock:
                    stub.pinging += 1
                try:
                    while time.monotonic() < pinging_until:
                        self.wfile.write(b": ping\n\n")
                        self.wfile.flush()
                        if stub._stopping.wait(0.2):
                            return
                finally:
                    with stub._lock:
                        stub.pinging -= 1
                for event in _chunks(request, reply):
                    if reply.cut and event["choices"] and event["choices"][0]["finish_reason"]:
                        return
                    if reply.chunk_delay and event["choices"] and event["choices"][0]["delta"].get("content"):
                        if stub._stopping.wait(reply.chunk_delay):
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

    def queue_for(self, purpose: str, *replies: StubReply | str) -> None:
        """Answer the next requests of `purpose` (query_rewrite, core_memory, …) with `replies`, in order."""
        kept = self._by_purpose.setdefault(purpose, deque())
        kept.extend(reply if isinstance(reply, StubReply) else StubReply(reply) for reply in replies)

    def _next_reply(self, request: dict[str, Any]) -> StubReply:
        system = " ".join(
            str(message.get("content")) for message in request.get("messages", []) if message.get("role") == "system"
        )
        for purpose, kept in self._by_purpose.items():
            if kept and (f"〔PersonaLab任务：{purpose}〕" in system or f"〔PersonaLab task: {purpose}〕" in system):
                return kept.popleft()
        if self._queue:
            return self._queue.popleft()
        return StubReply(reader_answer(request)) if self.reader else StubReply()

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


def _prompt_tokens(
    request: dict[str, Any], chars_per_token: float, text_tokens: Callable[[str], int] | None = None
) -> int:
    from langchain_core.messages.utils import count_tokens_approximately

    messages = [
        {"role": m.get("role", "user"), "content": str(m.get("content", ""))} for m in request.get("messages") or []
    ]
    if text_tokens is not None:
        rendered = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text_tokens(rendered + "<|im_start|>assistant\n")
    return count_tokens_approximately(messages, chars_per_token=chars_per_token) if messages else 0


def _capped(request: dict[str, Any], content: str) -> tuple[str, str]:
    """The answer within the request's max tokens (one character each) and its finish_reason."""
    cap = request.get("max_tokens") or request.get("max_completion_tokens")
    return (content[: int(cap)], "length") if cap and len(content) > int(cap) else (content, "stop")


def _completion(request: dict[str, Any], content: str) -> dict[str, Any]:
    content, finish = _capped(request, content)
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "stub-model"),
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish},
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": len(content), "total_tokens": 10 + len(content)},
    }


def _chunks(request: dict[str, Any], reply: StubReply) -> Iterator[dict[str, Any]]:
    base = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": int(time.time())}
    base["model"] = request.get("model", "stub-model")
    yield base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    text, finish = _capped(request, reply.content)
    for start in range(0, len(text), reply.chunk):
        piece = text[start : start + reply.chunk]
        yield base | {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
    yield base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
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
