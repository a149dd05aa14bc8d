"""The reply model's own tokenizer, read from a Hugging Face `tokenizer.json` (`PERSONALAB_TOKENIZER`; issue 17).

With it the prompt budgets and the context window count the tokens the model will see, not an estimate: a small
English-first model splits a Chinese character into two or three tokens, which the approximate counter cannot know.
Model repositories ship the file beside the weights (the same file llama.cpp's converter reads). Loaded once per
path and process; encoding a 2,000-character prompt takes well under a millisecond (Rust).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from personalab.nodes.rules.errors import ConfigError
from personalab.nodes.rules.tokens import TextTokens


@lru_cache(maxsize=4)
def text_tokens_of(path: str) -> TextTokens:
    """A function counting a text's tokens with the tokenizer at `path` (no special tokens added: the chat
    template's are `MESSAGE_OVERHEAD`). Raises `ConfigError` naming PERSONALAB_TOKENIZER when it cannot be read."""
    from tokenizers import Tokenizer  # imported here: only a configured tokenizer pays for it

    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"PERSONALAB_TOKENIZER={path!r}: no such file (a Hugging Face tokenizer.json)")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises a bare Exception for a file it cannot parse
        raise ConfigError(f"PERSONALAB_TOKENIZER={path!r}: not a Hugging Face tokenizer.json ({exc})") from exc

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count
