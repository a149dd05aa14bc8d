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

A slow model (issue 30) whose reply would not fit what is left is sent a shorter prompt instead of being cut:
`prompt_tokens_over` is how many of the prompt's new tokens (those the server's prompt cache does not hold) must go
for the expected time — new tokens at the measured reading speed, then the usual reply's tokens at the writing
speed — to fit `FIT_SHARE` of the seconds left; the retrieved region gives them up, lowest-ranked first.

A reply longer than usual would still be cut at the deadline, and a cut turn stores nothing. So the reply's request
asks for at most the tokens the measured writing speed can write in `FIT_SHARE` of what is left once the prompt's
new tokens are read (`reply_tokens_within`, never fewer than `REPLY_CAP_FLOOR`): the model then ends by itself
(finish_reason `length`) before the deadline, and the reply is kept up to its last whole sentence (`whole_sentences`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

REWRITE_SHARE = 0.15
POST_REPLY_SHARE = 0.2
GEN_SLOWER = 10  # prompt tokens read per answer token written, until the answer speed is measured
MIN_CALL_SECONDS = 0.05  # less than this left: the call is not made (it could not answer in time)
FIT_SHARE = 0.85  # of the seconds left: a measured speed varies from turn to turn on a shared CPU
REPLY_TOKENS_SHARE = 0.25  # a reply's tokens, of PERSONALAB_MAX_REPLY_TOKENS, until replies were counted
REPLY_TOKENS_WEIGHT = 0.3  # the weight of the newest reply in the running mean of replies' tokens
REPLY_CAP_FLOOR = 16  # the fewest reply tokens a time-capped request asks for: fewer say nothing in character
SENTENCE_END = re.compile(r"[。！？!?…~～」』”]+|\.(?=\s|$)")


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
    # the running mean of the replies' written tokens (None until a reply was counted)
    reply_tokens: float | None = None

    def seconds(self, prompt_tokens: int, answer_tokens: int) -> float:
        """Expected seconds of a request whose prompt is evaluated whole (nothing reused from the cache)."""
        return prompt_tokens / self.prompt_per_s + self.writing_seconds(answer_tokens)

    def writing_seconds(self, answer_tokens: float) -> float:
        """Expected seconds to write `answer_tokens`."""
        # not measured yet: a CPU writes about ten times slower than it reads (the 1.5B model here: 50–66 vs 5–6)
        return answer_tokens / (self.gen_per_s or self.prompt_per_s / GEN_SLOWER)

    def usual_reply_tokens(self, max_reply_tokens: int) -> float:
        """The tokens a reply usually takes: the running mean of the counted replies, at most the cap."""
        if self.reply_tokens is None:
            return max_reply_tokens * REPLY_TOKENS_SHARE
        return min(float(max_reply_tokens), self.reply_tokens)


def next_reply_tokens(old: float | None, written: int) -> float:
    """The running mean of the replies' tokens after one more reply of `written` tokens."""
    return float(written) if old is None else old + REPLY_TOKENS_WEIGHT * (written - old)


def prompt_tokens_over(speed: ModelSpeed, new_tokens: int, reply_tokens: float, seconds_left: float) -> int:
    """Tokens of the prompt's new part (what the server must evaluate) to leave out so that evaluating the rest and
    writing a usual reply is expected within `FIT_SHARE` of `seconds_left`; 0 when it fits already."""
    readable = (seconds_left * FIT_SHARE - speed.writing_seconds(reply_tokens)) * speed.prompt_per_s
    return max(0, math.ceil(new_tokens - max(readable, 0.0)))


def reply_tokens_within(speed: ModelSpeed, new_tokens: int, seconds_left: float, max_reply_tokens: int) -> int | None:
    """The most reply tokens expected to be written within `FIT_SHARE` of `seconds_left` once the prompt's
    `new_tokens` are read, at least `REPLY_CAP_FLOOR`; None when `max_reply_tokens` fits (the cap stays)."""
    writing = seconds_left * FIT_SHARE - new_tokens / speed.prompt_per_s
    tokens = math.floor(writing * (speed.gen_per_s or speed.prompt_per_s / GEN_SLOWER))
    if tokens >= max_reply_tokens:
        return None
    return min(max_reply_tokens, max(REPLY_CAP_FLOOR, tokens))


def whole_sentences(text: str) -> str:
    """A reply the time cap ended mid-sentence, up to its last sentence end (。！？…, a closing bracket or quote, an
    English full stop); the text as it is when it has none past its first third."""
    ends = [match.end() for match in SENTENCE_END.finditer(text)]
    last = ends[-1] if ends else 0
    return text[:last].rstrip() if last > len(text) // 3 else text
