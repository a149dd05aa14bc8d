"""`personalab eval probes-cn` (issue 11: the Chinese probe set) on the tiny MemoryBank-shaped fixture written for
these tests (tests/fixtures/memorybank_tiny), with labels written here; and the shipped labels file's shape."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import one_line
from personalab.evals.__main__ import main
from personalab.evals.probes_cn import LABELS, LABELS_FORMAT, question_sha1, recall_at

FIXTURE = Path(__file__).parent / "fixtures" / "memorybank_tiny"
ROW = r"\s+(\d+)\s+(\d\.\d{3})\s+(\d\.\d{3})$"


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def labels_file(tmp_path: Path, labels: Sequence[dict[str, Any]]) -> str:
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"format": LABELS_FORMAT, "version": 1, "labels": list(labels)}), encoding="utf-8")
    return str(path)


def label(user: str, index: int, question: str, *evidence: str) -> dict[str, Any]:
    return {"user": user, "index": index, "question_sha1": question_sha1(question), "evidence": list(evidence)}


def test_recall_counts_an_exchange_once_whichever_of_its_lines_came_back() -> None:
    ranked = ["2023-04-27#2", "2023-04-27#2", "2023-04-29#1", "2023-05-08#1"]
    assert recall_at(ranked, ["2023-04-27#2"], 1) == 1.0
    assert recall_at(ranked, ["2023-04-27#2", "2023-05-08#1"], 3) == 0.5
    assert recall_at(ranked, ["2023-04-27#2", "2023-05-08#1"], 4) == 1.0


def test_the_labelled_questions_are_asked_of_their_users_memories(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_EMBEDDINGS", "offline")  # --embeddings sets it: restored after the test
    labels = labels_file(
        tmp_path,
        [
            label("王峰", 0, "我喜欢听什么类型的音乐？", "2023-04-27#2"),
            label("陈一", 0, "我的狗叫什么名字？", "2023-05-01#1"),
        ],
    )
    code, out, err = cli(capsys, "eval", "probes-cn", str(FIXTURE), "--labels", labels, "--embeddings", "offline")
    assert code == 0, err
    assert "2 labelled questions of 2 users, 2 evidence exchanges" in out
    assert "embeddings: OfflineUSEEmbeddings" in out
    assert "ingest: 10 memories" in out  # every query and response of both users, one memory each
    product = re.search(r"^  product" + ROW, out, re.M)
    assert product is not None and product.group(1) == "2"
    assert float(product.group(2)) == 1.0  # the facts come back within the first five memories
    assert re.search(r"^  BM25" + ROW, out, re.M)
    assert re.search(r"p50 \d+\.\d ms, p95 \d+\.\d ms over 2 retrievals", out)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (label("王峰", 0, "别的问题", "2023-04-27#2"), "question 0 of 王峰 is not the one labelled (SHA-1 differs)"),
        (label("王峰", 5, "我喜欢听什么类型的音乐？", "2023-04-27#2"), "王峰 has no question 5"),
        (label("王峰", 0, "我喜欢听什么类型的音乐？", "2023-04-27#9"), "evidence must be a non-empty list"),
        (label("李四", 0, "我喜欢听什么类型的音乐？", "2023-04-27#2"), "no user '李四' in the data"),
    ],
)
def test_a_label_that_does_not_fit_the_data_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, bad: dict[str, Any], message: str
) -> None:
    code, out, err = cli(capsys, "eval", "probes-cn", str(FIXTURE), "--labels", labels_file(tmp_path, [bad]))
    assert code == 2 and message in one_line(err) and "label 1" in err


def test_the_shipped_labels_cover_at_least_100_questions_once_each() -> None:
    data = json.loads(LABELS.read_text(encoding="utf-8"))
    assert data["format"] == LABELS_FORMAT
    keys = [(item["user"], item["index"]) for item in data["labels"]]
    assert len(keys) >= 100 and len(set(keys)) == len(keys)
    for item in data["labels"]:
        assert re.fullmatch(r"[0-9a-f]{10}", item["question_sha1"])
        assert item["evidence"] and all(re.fullmatch(r"2023-\d\d-\d\d#\d+", e) for e in item["evidence"])


PARAPHRASE = Path(__file__).parent / "fixtures" / "paraphrase_cn.json"
PARAPHRASE_ROW = r"\s+(\d+)" + r"\s+(\d\.\d{3})" * 4 + r"\s+[\d.]+\s+[\d.]+$"


def _paraphrase_file(tmp_path: Path, answer: str = "b") -> str:
    memories = [
        {"id": "a", "content": "我们在废弃加油站找到了一罐黄桃罐头", "importance": 0.9, "turn": 9},
        {"id": "b", "content": "阿杰对猫毛过敏，一靠近猫就打喷嚏", "importance": 0.1, "turn": 1},
        {"id": "c", "content": "营地的规矩是天黑以后不许单独出门", "importance": 0.8, "turn": 8},
    ]
    probes = [{"question": "他对什么动物过敏？", "answer": answer}, {"question": "吃到了什么甜的东西？", "answer": "a"}]
    path = tmp_path / "paraphrase.json"
    data = {"format": "personalab.paraphrase-cn", "memories": memories, "probes": probes}
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return str(path)


def test_paraphrase_probes_compare_the_seed_sum_the_gated_ranking_and_the_dense_encoder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # issue 29: the three rankings of the same memories, asked the same questions, in one run
    code, out, err = cli(capsys, "eval", "paraphrase-cn", _paraphrase_file(tmp_path), "--data-dir", str(tmp_path / "d"))
    assert code == 0, err
    rows = {way: re.search(rf"^\s+{way}" + PARAPHRASE_ROW, out, re.M) for way in ("seed sum", "gated", "dense")}
    for way, row in rows.items():
        assert row is not None, (way, out)
        n, *figures = row.groups()
        assert n == "2" and all(0.0 <= float(f) <= 1.0 for f in figures)
        assert float(figures[-1]) == 1.0  # three memories: every answer is in the first ten


def test_a_paraphrase_probe_naming_no_memory_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = cli(capsys, "eval", "paraphrase-cn", _paraphrase_file(tmp_path, answer="zz"))
    assert code == 2 and "probe 1 names no memory of the file: 'zz'" in one_line(err)


def test_the_shipped_paraphrase_probes_ask_about_thirty_memories() -> None:
    data = json.loads(PARAPHRASE.read_text(encoding="utf-8"))
    ids = {m["id"] for m in data["memories"]}
    assert len(ids) == len(data["memories"]) == 30
    assert len(data["probes"]) == 30 and {p["answer"] for p in data["probes"]} == ids
