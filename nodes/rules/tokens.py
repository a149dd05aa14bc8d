"""How the prompt's tokens are counted (seed 002 Prompt区域分配; issue 17: every turn fits the model's window).

The region budgets and the model's window are in the reply model's tokens. Two ways to count them:
- approximate (the default): langchain-core's `count_tokens_approximately` at `chars_per_token` characters per
  token. Quick and model-free, but a guess: a small English-first model's tokenizer splits a Chinese character into
  two or three tokens, so at the default 1.5 such a prompt can overflow the real window;
- the model's own tokenizer (`PERSONALAB_TOKENIZER`, a Hugging Face `tokenizer.json`; loaded in stores/tokenizer.py):
  each message counts its content's tokens plus `MESSAGE_OVERHEAD` for the chat template's role and separators.

Both count a message list the same way (per message, then summed), so the budgets, the window fit and the cut of an
over-long world setting all use one counter. Pure: the tokenizer comes in as a function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from langchain_core.messages.utils import count_tokens_approximately

TextTokens = Callable[[str], int]

# a chat template's role name, start and end markers take about 3–5 tokens per message (ChatML: <|im_start|>,
# the role, a newline, <|im_end|>, a newline)
MESSAGE_OVERHEAD = 5
ELLIPSIS = "…"


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of texts and message lists: the model's tokenizer when given, else the approximate counter."""

    chars_per_token: float = 1.5
    text_tokens: TextTokens | None = field(default=None, compare=False, repr=False)
    # what counts, for the turn's debug: "approximate" or the tokenizer's name
    name: str = "approximate"

    def text(self, text: str) -> int:
        """Tokens of one string, nothing added per message."""
        if not text:
            return 0
        if self.text_tokens is not None:
            return int(self.text_tokens(text))
        return math.ceil(len(text) / self.chars_per_token)

    def messages(self, messages: Sequence[Mapping[str, str]]) -> int:
        """Tokens of a message list as the model receives it (contents, roles and the template's overhead)."""
        if not messages:
            return 0
        if self.text_tokens is None:
            return count_tokens_approximately([dict(m) for m in messages], chars_per_token=self.chars_per_token)
        return sum(self.text(str(m.get("content") or "")) + MESSAGE_OVERHEAD for m in messages)

    def cut(self, text: str, tokens: int, *, prefix: str = "") -> str:
        """The longest start of `text` (with an ellipsis when cut) whose message `prefix + start` counts at most
        `tokens`; found by bisection, as a tokenizer is not linear in characters."""

        def fits(candidate: str) -> bool:
            return self.messages([{"role": "system", "content": prefix + candidate}]) <= tokens

        if fits(text):
            return text
        low, high = 0, len(text)
        while low < high:
            middle = (low + high + 1) // 2
            if fits(text[:middle].rstrip() + ELLIPSIS):
                low = middle
            else:
                high = middle - 1
        return text[:low].rstrip() + ELLIPSIS
