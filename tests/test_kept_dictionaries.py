"""jieba's dictionaries kept in the data directory (issue 29: a one-shot turn loaded them for ~1 s beside its
imports). What a user relies on: the same segmentation and keywords as jieba's own dictionaries, in every process,
whatever the kept files' state (missing, damaged, unwritable)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from personalab.nodes.rules.keywords import IdfTable, prefix_dictionary_bytes, prefix_dictionary_from_bytes

TEXTS = ["我住在北京大学附近，雷娜去了黑市。", "雷娜在黑市买了一把生锈的左轮手枪，老陈很开心。", "雷娜黑市"]

# a new process: segmentation and keywords as a user's command gets them (stores imported first, as every command)
PROBE = (
    "import hashlib, sys\n"
    "import personalab.stores\n"
    "from personalab.nodes.rules.keywords import _jieba, extract_keywords, tokenize\n"
    f"for text in {TEXTS!r}:\n"
    "    print('|'.join(tokenize(text)))\n"
    "    print('|'.join(extract_keywords(text)))\n"
    "dt = _jieba().dt\n"
    "print(len(dt.FREQ), dt.total)\n"
)


def _play(data: Path, seed: str = "1") -> list[str]:
    env = {**os.environ, "PERSONALAB_DATA_DIR": str(data), "PYTHONHASHSEED": seed}
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def jiebas_own() -> list[str]:
    """The probe's lines with jieba's own loading (no kept files: a process that never imports the stores)."""
    code = PROBE.replace("import personalab.stores\n", "")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()


def _kept(data: Path, name: str) -> Path:
    (path,) = (data / "cache").glob(f"jieba-*-{name}-*.bin")
    return path


def test_kept_dictionaries_give_jiebas_own_words_and_keywords_in_every_process(
    tmp_path: Path, jiebas_own: list[str]
) -> None:
    """The first process keeps both dictionaries; later ones (another hash salt each) read them and segment and
    rank exactly as jieba's own loading does."""
    data = tmp_path / "data"
    assert _play(data, seed="1") == jiebas_own
    prefix, idf = _kept(data, "prefix"), _kept(data, "idf")
    assert _play(data, seed="2") == jiebas_own == _play(data, seed="random")
    assert (_kept(data, "prefix"), _kept(data, "idf")) == (prefix, idf)  # read, not made again


def test_a_later_process_reads_the_kept_prefix_dictionary(tmp_path: Path) -> None:
    """A kept dictionary is what the next process segments with (proved with a one-word dictionary of its own)."""
    data = tmp_path / "data"
    _play(data)
    _kept(data, "prefix").write_bytes(prefix_dictionary_bytes({"雷": 0, "雷娜": 0, "雷娜黑": 0, "雷娜黑市": 9}, 9))
    lines = _play(data)
    assert lines[4] == "雷娜黑市"  # jieba's own dictionary: 雷娜 and 黑市
    assert lines[-1] == "4 9"


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "unreadable"])
def test_a_damaged_kept_file_is_made_again_and_play_is_unchanged(
    tmp_path: Path, jiebas_own: list[str], damage: str
) -> None:
    data = tmp_path / "data"
    _play(data)
    for name in ("prefix", "idf"):
        path = _kept(data, name)
        good = path.read_bytes()
        if damage == "truncated":
            path.write_bytes(good[: len(good) // 2])
        elif damage == "flipped":
            path.write_bytes(good[:-100] + bytes([good[-100] ^ 0xFF]) + good[-99:])
        elif damage == "empty":
            path.write_bytes(b"")
        else:
            path.unlink()
            path.mkdir()  # a directory where the file should be: neither read nor replaced
    assert _play(data) == jiebas_own
    if damage != "unreadable":
        prefix = prefix_dictionary_from_bytes(_kept(data, "prefix").read_bytes())
        assert len(prefix[0]) == int(jiebas_own[-1].split()[0])
        assert IdfTable.from_bytes(_kept(data, "idf").read_bytes()).size > 250_000


def test_without_a_usable_data_directory_jieba_loads_its_own(tmp_path: Path, jiebas_own: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert _play(blocker / "data") == jiebas_own


def test_kept_bytes_round_trip_and_anything_else_is_refused() -> None:
    freq = {"北": 0, "北京": 12, "北京大学": 3, "a": 1}
    assert prefix_dictionary_from_bytes(prefix_dictionary_bytes(freq, 16)) == (freq, 16)
    assert prefix_dictionary_from_bytes(prefix_dictionary_bytes({}, 0)) == ({}, 0)
    table = IdfTable.parse("雷娜 1.5\n黑市 2.0\n雷娜 3.0\n")
    again = IdfTable.from_bytes(table.to_bytes())
    assert (again.size, again.get("雷娜", 0.0), again.get("黑市", 0.0), again.median) == (2, 3.0, 2.0, 3.0)
    for bad in (b"", b"PLjieba1", hashlib.sha256(b"x").digest() * 4, table.to_bytes()):
        with pytest.raises(ValueError, match="prefix dictionary"):
            prefix_dictionary_from_bytes(bad)
    for bad in (b"", prefix_dictionary_bytes(freq, 16), table.to_bytes()[:-1]):
        with pytest.raises(ValueError, match="IDF table"):
            IdfTable.from_bytes(bad)
