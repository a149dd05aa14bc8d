"""jieba's dictionaries kept in the data directory in a form that loads fast (issue 29: one-shot commands).

A new process that segments Chinese loads jieba's prefix dictionary (498,113 words and prefixes): jieba reads it
from its own `marshal` file in the temporary directory in ~0.65 s, or builds it from `dict.txt` in seconds when that
file is missing. Keyword extraction parses jieba's IDF table (270,000 lines) in ~0.4 s. In a one-shot `personalab
turn` both ran beside the imports and made the turn 1.5× its imports. Kept as `<data dir>/cache/jieba-*.bin` (the
words as one string and the numbers as arrays, `nodes.rules.keywords` says the format), they load in ~0.17 s and a
few milliseconds. Made on first use from jieba's own; a file that is missing, damaged or from another jieba version
is made again, and any failure falls back to jieba's own loading (same words, same numbers, only slower).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.keywords import (
    IdfTable,
    keep_dictionaries_with,
    prefix_dictionary_bytes,
    prefix_dictionary_from_bytes,
)

log = logging.getLogger(__name__)


def _kept_file(jieba: ModuleType, name: str, source: str) -> Path | None:
    """`<data dir>/cache/jieba-<version>-<name>-<size of jieba's source file>.bin`; None without a data directory."""
    from personalab.nodes.rules.errors import StoreUnavailable
    from personalab.stores.config import data_dir

    try:
        stamp = os.stat(os.path.join(os.path.dirname(jieba.__file__ or ""), source)).st_size
        return data_dir() / "cache" / f"jieba-{jieba.__version__}-{name}-{stamp}.bin"
    except (OSError, StoreUnavailable, AttributeError) as exc:
        log.info("jieba's %s is not kept: %s", name, exc)
        return None


def _read(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("kept dictionary %s not read: %s", path, exc)
        return None


def _keep(path: Path | None, data: bytes) -> None:
    """Write `data` to `path` whole or not at all (`stores.files.write_file`: processes may race to write it)."""
    if path is None:
        return
    from personalab.stores.files import write_file  # here: its checks import pydantic, every stores import this module

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file(path, data, overwrite=True)
    except (OSError, InvalidInput) as exc:
        log.warning("kept dictionary %s not written: %s", path, exc)


class DataDirectoryKeeper:
    """`nodes.rules.keywords.DictionaryKeeper` on files in the data directory's cache folder."""

    def prefix_dictionary(self, jieba: ModuleType) -> None:
        path = _kept_file(jieba, "prefix", "dict.txt")
        data = _read(path)
        if data is not None:
            try:
                jieba.dt.FREQ, jieba.dt.total = prefix_dictionary_from_bytes(data)
                jieba.dt.initialized = True
                return
            except ValueError as exc:
                log.warning("kept dictionary %s not used (%s): made again", path, exc)
        jieba.dt.initialize()  # jieba's own loading (its marshal file, or dict.txt)
        _keep(path, prefix_dictionary_bytes(jieba.dt.FREQ, jieba.dt.total))

    def idf_table(self, build: Callable[[], IdfTable]) -> IdfTable:
        import jieba

        path = _kept_file(jieba, "idf", os.path.join("analyse", "idf.txt"))
        data = _read(path)
        if data is not None:
            try:
                return IdfTable.from_bytes(data)
            except ValueError as exc:
                log.warning("kept dictionary %s not used (%s): made again", path, exc)
        table = build()
        _keep(path, table.to_bytes())
        return table


def keep_jieba_dictionaries() -> None:
    """From now on, jieba's dictionaries load from (and are kept in) the data directory."""
    keep_dictionaries_with(DataDirectoryKeeper())
