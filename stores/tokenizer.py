"""The reply model's own tokenizer (`PERSONALAB_TOKENIZER`; issue 17): a Hugging Face `tokenizer.json`, or the
model's GGUF file as llama.cpp serves it.

With it the prompt budgets and the context window count the tokens the model will see, not an estimate: a small
English-first model splits a Chinese character into two or three tokens, which the approximate counter cannot know.
Model repositories ship `tokenizer.json` beside the weights. A GGUF file carries its vocabulary and merges
(`tokenizer.ggml.*`); for byte-level BPE models (`tokenizer.ggml.model` = gpt2: Llama 3, Qwen 2, SmolLM2, …) they
are turned into a `tokenizers` BPE once and kept as `<data dir>/cache/tokenizers/<key>.json` (reading 50,000
tokens out of a GGUF file takes seconds; the kept file loads in milliseconds). The GGUF pre-tokenizer's own regex
is replaced by GPT-2's: counts can differ by a few tokens in a thousand, which the window's 10 % margin absorbs.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from personalab.nodes.rules.errors import ConfigError
from personalab.nodes.rules.tokens import TextTokens
from personalab.stores.config import data_dir

GGUF_CONTROL = 3  # tokenizer.ggml.token_type of control tokens (<|im_start|>, …): one token each, never split


def _bad(path: str, problem: str) -> ConfigError:
    return ConfigError(f"PERSONALAB_TOKENIZER={path!r}: {problem}")


def _from_gguf(file: Path, path: str) -> Any:
    """A `tokenizers.Tokenizer` built from a GGUF file's byte-level BPE vocabulary (kept in the data dir's cache)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    stat = file.stat()
    key = hashlib.sha256(f"{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:24]
    kept = data_dir() / "cache" / "tokenizers" / f"{key}.json"
    if kept.is_file():
        return Tokenizer.from_file(str(kept))
    import gguf  # the GGUF reader: only a GGUF tokenizer pays for it

    try:
        reader = gguf.GGUFReader(str(file))
    except Exception as exc:  # the reader raises ValueError or struct errors on a file that is not GGUF
        raise _bad(path, f"not a GGUF file ({exc})") from exc

    def field(name: str) -> Any:
        item = reader.fields.get(name)
        if item is None:
            raise _bad(path, f"the GGUF file has no {name}")
        return item.contents()

    kind = field("tokenizer.ggml.model")
    if kind != "gpt2":
        raise _bad(path, f"a GGUF tokenizer of type {kind!r}; only byte-level BPE (gpt2) is read: give tokenizer.json")
    tokens: list[str] = field("tokenizer.ggml.tokens")
    merges = [tuple(merge.split(" ", 1)) for merge in field("tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE(vocab={token: n for n, token in enumerate(tokens)}, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    types = reader.fields.get("tokenizer.ggml.token_type")
    if types is not None:
        control = [tokens[n] for n, kind_of in enumerate(types.contents()) if kind_of == GGUF_CONTROL]
        tokenizer.add_special_tokens(control)
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
    tokenizer.save(str(partial))
    partial.replace(kept)  # whole or not at all: another process may be reading the cache
    return tokenizer


@lru_cache(maxsize=4)
def text_tokens_of(path: str) -> TextTokens:
    """A function counting a text's tokens with the tokenizer at `path` (no special tokens added: the chat
    template's are `MESSAGE_OVERHEAD`). Raises `ConfigError` naming PERSONALAB_TOKENIZER when it cannot be read."""
    from tokenizers import Tokenizer  # imported here: only a configured tokenizer pays for it

    file = Path(path).expanduser()
    if not file.is_file():
        raise _bad(path, "no such file (a Hugging Face tokenizer.json or the model's .gguf)")
    if file.suffix.lower() == ".gguf":
        tokenizer = _from_gguf(file, path)
    else:
        try:
            tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises a bare Exception for a file it cannot parse
            raise _bad(path, f"not a Hugging Face tokenizer.json ({exc})") from exc

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count
