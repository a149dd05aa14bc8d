"""The turn's deadline (seed 002 响应时间要求: 总响应时间应控制在30秒以内), as pure arithmetic on seconds.

The clock starts when the turn reaches its first model call (the query rewrite; the history read and the
memory build before it are local reads of a few milliseconds). Shares of the deadline D:
- the query rewrite: at most `REWRITE_SHARE` × D (and at most the per-request PERSONALAB_LLM_TIMEOUT); on timeout
  the raw input is the query;
- retrieval: its own cap (PERSONALAB_RAG_TIMEOUT, 1.5 s);
- after the reply: `POST_REPLY_SHARE` × D is held back for each model call the turn makes once the reply is
  stored (the core-memory maintenance on its turns, the review in llm mode); each gets what is left of D;
- the reply: everything else. It streams until its own end or the reply's deadline; past it, the stream is
  closed and the turn fails as a cut turn (no reply stored, the instance free).
"""

from __future__ import annotations

from dataclasses import dataclass

REWRITE_SHARE = 0.15
POST_REPLY_SHARE = 0.2
GEN_SLOWER = 10  # prompt tokens read per answer token written, until the answer speed is measured
MIN_CALL_SECONDS = 0.05  # less than this left: the call is not made (it could not answer in time)


def rewrite_seconds(deadline_s: float) -> float:
    """Seconds the query rewrite may take (the request's own timeout may be shorter)."""
    return deadline_s * REWRITE_SHARE


def post_reply_reserve(deadline_s: float, calls_after_reply: int) -> float:
    """Seconds held back for the model calls that follow the stored reply."""
    return deadline_s * POST_REPLY_SHARE * max(0, calls_after_reply)


def reply_deadline(deadline_at: float, deadline_s: float, calls_after_reply: int) -> float:
    """The time (same clock as `deadline_at`) by which the reply must have streamed to its end."""
    return deadline_at - post_reply_reserve(deadline_s, calls_after_reply)


def call_seconds(until: float, now: float, request_timeout: float) -> float | None:
    """The timeout of a model call that must end by `until`; None when too little is left to make it."""
    left = until - now
    return min(request_timeout, left) if left >= MIN_CALL_SECONDS else None


@dataclass(frozen=True)
class ModelSpeed:
    """A model's measured speed on its server (issue 30): prompt tokens evaluated a second, answer tokens written
    a second (None until an answer long enough to time was written)."""

    prompt_per_s: float
    gen_per_s: float | None = None

    def seconds(self, prompt_tokens: int, answer_tokens: int) -> float:
        """Expected seconds of a request whose prompt is evaluated whole (nothing reused from the cache)."""
        # not measured yet: a CPU writes about ten times slower than it reads (the 1.5B model here: 50–66 vs 5–6)
        writing = answer_tokens / (self.gen_per_s or self.prompt_per_s / GEN_SLOWER)
        return prompt_tokens / self.prompt_per_s + writing
