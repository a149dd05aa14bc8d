"""`personalab eval locomo` on a tiny LoCoMo-shaped fixture written for these tests (tests/fixtures/locomo_tiny.json:
two conversations, one of them Chinese, with the real file's quirks — a session date without its session, an
image caption, malformed and missing evidence ids, a question without evidence, an adversarial question)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from personalab.evals.__main__ import main
from personalab.evals.locomo import load_locomo, normalise_evidence, recall_at

FIXTURE = Path(__file__).parent / "fixtures" / "locomo_tiny.json"
ROW = r"\s+(\d+)\s+(\d\.\d{3})\s+(\d\.\d{3})\s+(\d\.\d{3})$"


def test_evidence_ids_are_split_and_normalised() -> None:
    raw = ["D8:6; D9:17", "D9:1 D4:4 D4:6", "D:11:26", "D30:05", "D", "D8:6"]
    assert normalise_evidence(raw) == ["D8:6", "D9:17", "D9:1", "D4:4", "D4:6", "D11:26", "D30:5"]


def test_the_loader_reads_the_sessions_that_exist_with_their_dates_and_captions() -> None:
    first, second = load_locomo(FIXTURE)
    assert first.sample_id == "tiny-1" and first.speakers == ("Aiko", "Bram")
    assert [t.dia_id for t in first.turns] == ["D1:1", "D1:2", "D1:3", "D1:4", "D1:5", "D2:1", "D2:2", "D2:3"]
    assert first.turns[3].caption == "a photo of a clay vase on a wheel" and first.turns[0].caption == ""
    assert first.turns[5].date == "4:30 pm on 20 April, 2023" and first.turns[5].session == 2
    evidence = {q.question: q.evidence for q in first.questions}
    assert evidence["What hobbies did Bram take up?"] == ("D1:4", "D2:1")
    assert evidence["What did Bram make in pottery class?"] == ("D1:4",)
    assert evidence["How long did Bram's marathon take?"] == ("D2:3",)  # D9:9 is no turn of it
    assert first.dropped_evidence == 2  # "D" and "D9:9"
    assert second.turns[0].speaker == "陈" and len(second.questions) == 1


def test_recall_is_the_share_of_evidence_turns_in_the_top_k() -> None:
    ranked = ["D1:1", "D1:2", "D2:3", "D2:1"]
    assert recall_at(ranked, ["D2:1", "D2:3"], 3) == 0.5
    assert recall_at(ranked, ["D2:1", "D2:3"], 4) == 1.0
    with pytest.raises(ValueError, match="without evidence"):
        recall_at(ranked, [], 5)


def test_the_eval_reports_product_and_baseline_recall_and_keeps_the_store_where_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "locomo"
    assert main(["eval", "locomo", str(FIXTURE), "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out

    assert "LoCoMo: 2 conversation(s), 11 turns, evidence ids dropped (malformed or no such turn): 2" in out
    assert "questions: 6 of categories 1-4 with evidence (1 without evidence skipped; category 5 left out)" in out
    product, baseline = out.split("BM25 baseline")
    rows = re.findall(rf"^  (all \(1-4\)|\d [a-z-]+){ROW}", product, re.M)
    assert [(name, int(n)) for name, n, *_ in rows] == [
        ("all (1-4)", 6),
        ("1 multi-hop", 1),
        ("2 temporal", 1),
        ("3 open-domain", 1),
        ("4 single-hop", 3),
    ]
    assert rows[0][4] == "1.000"  # a tiny dialogue: every evidence turn is among the first 20
    assert re.search(rf"^  all \(1-4\){ROW}", baseline, re.M)
    assert re.search(r"^  tiny-1\s+5  \d\.\d{3} / \d\.\d{3}$", out, re.M)
    assert re.search(r"^time per retrieval \(query embedding included\): p50 \d+\.\d ms, p95 \d+\.\d ms", out, re.M)
    assert re.search(r"^goal: R@10 at least 0\.75: \d\.\d{3} — (met|NOT met)$", out, re.M)

    # one instance per conversation, one memory per turn, the two previous turns as context and the session date
    from personalab.stores.db import dispose_engines
    from personalab.stores.memory import MemoryStore

    store = MemoryStore(db_url=f"sqlite:///{data / 'locomo.db'}", chroma_path=str(data / "chroma"))
    first, second = store.list_memories(1), store.list_memories(2)
    dispose_engines()
    assert (len(first), len(second)) == (8, 3)
    assert first[3].content == (
        "Bram: That's wonderful! What did you name it?\n"
        "Aiko: I named her Pixel, she loves chasing laser dots.\n"
        "[3 March, 2023] Bram: Guess what, I started pottery classes at the community studio. "
        "[shares a photo of a clay vase on a wheel]"
    )
    assert second[0].content == "[9 June, 2023] 陈: 我上周在杭州学会了做龙井虾仁，下次做给你吃。"


def test_a_subset_of_conversations_can_be_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "locomo", str(FIXTURE), "--conversations", "1", "--context-lines", "0"]) == 0
    out = capsys.readouterr().out
    assert "LoCoMo: 1 conversation(s), 8 turns" in out and "no context" in out
    assert re.search(r"^  all \(1-4\)\s+5\s", out, re.M)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not JSON"),
        ('{"sample_id": "x"}', "expected a JSON array of conversations"),
        ('[{"sample_id": "x"}]', "locomo.json[0]: not a LoCoMo conversation"),
        ('[{"conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1"}]}}]', "session 1, turn 1 has no text"),
    ],
)
def test_a_bad_file_is_one_line_on_stderr_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    path = tmp_path / "locomo.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["eval", "locomo", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("personalab-evals: error: ") and message in err and err.count("\n") == 1
