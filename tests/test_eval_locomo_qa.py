"""`personalab eval locomo-qa` (issue 30): LoCoMo's questions answered by the run's model under named conditions,
through the real `ChatOpenAI` client against the OpenAI stub in its reader mode (tests/openai_stub.py: it answers
with the prompt's statement that best overlaps the question), on the tiny LoCoMo-shaped fixture of
tests/test_eval_locomo.py. With memory the reader finds the evidence; with none it cannot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, openai_stub_fixture  # noqa: F401 - the fixture
from personalab.evals.__main__ import main
from personalab.evals.locomo import load_locomo
from personalab.evals.locomo_qa import answer_f1, chosen_questions, token_f1

FIXTURE = Path(__file__).parent / "fixtures" / "locomo_tiny.json"


def test_f1_is_locomo_token_f1_with_chinese_by_character_and_multi_hop_parts() -> None:
    assert token_f1("Pixel", "Pixel") == 1.0
    assert token_f1("【平静】It was the kitten Pixel.", "pixel") == pytest.approx(0.4)  # it, was, kitten, pixel: P 1/4, R 1
    assert token_f1("I don't know", "Pixel") == 0.0
    assert token_f1("龙井虾仁", "他做了龙井虾仁") == pytest.approx(2 * 1 * (4 / 7) / (1 + 4 / 7))
    # multi-hop: each part of the answer matched with its best part of the reply, averaged
    assert answer_f1("running, pottery", "pottery, running", 1) == 1.0
    assert answer_f1("pottery", "pottery, running", 1) == 0.5
    assert answer_f1("pottery", "pottery, running", 4) == pytest.approx(2 * 1 * 0.5 / 1.5)


def test_questions_are_those_with_an_answer_spread_over_the_file() -> None:
    first = load_locomo(FIXTURE)[0]
    usable = chosen_questions(first, None)
    assert [q.category for q in usable] == [4, 2, 1, 3, 3, 4]  # category 5 (no answer) left out
    assert [q.question for q in chosen_questions(first, 3)] == [
        usable[0].question,
        usable[2].question,
        usable[4].question,
    ]


@pytest.fixture(name="reader")
def reader_fixture(openai_stub: OpenAIStub) -> OpenAIStub:
    openai_stub.reader = True
    return openai_stub


def test_memory_answers_what_no_notes_cannot_and_the_report_keeps_every_reply(
    reader: OpenAIStub, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "qa"
    code = main(
        [
            "eval",
            "locomo-qa",
            str(FIXTURE),
            "--conditions",
            "memory,recent,none",
            "--recent-turns",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    rows = report["rows"]
    assert len(rows) == 7  # six English questions with answers, one Chinese
    chinese = next(r for r in rows if r["conversation"] == "tiny-2")
    assert "龙井虾仁" in chinese["conditions"]["memory"]["reply"]
    assert chinese["conditions"]["memory"]["f1"] > 0.25  # character-level F1: 4 of the reply's ~20 characters
    # recent: the conversation's last exchange only (the two lines after the dish's); none: no notes at all
    assert chinese["conditions"]["recent"]["f1"] == chinese["conditions"]["none"]["f1"] == 0.0
    assert all(r["conditions"]["none"]["reply"] for r in rows)  # every reply kept, per condition
    summary = report["summary"]
    assert summary["memory"]["f1"] > summary["recent"]["f1"]
    assert summary["none"]["f1"] == 0.0
    # what each condition sent: the evidence line under memory, no notes under none
    systems = [str(r["messages"][0]["content"]) for r in reader.requests]
    assert any("I named her Pixel" in s for s in systems)
    assert sum("no notes" in s for s in systems) == len(rows)
    assert all(r.get("max_tokens") == 48 for r in reader.requests)  # the answer asked short, under llama.cpp's name
    printed = capsys.readouterr().out
    assert "memory − none:" in printed and "memory − recent:" in printed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--conditions", "memory,forgetful"], "--conditions: unknown condition 'forgetful'"),
        (["--conditions", "memory,memory"], "--conditions: give each of"),
        (["--questions", "0"], "--questions must be at least 1, got 0"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    reader: OpenAIStub, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", "locomo-qa", str(FIXTURE), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert reader.requests == []


def test_without_an_endpoint_it_says_so_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["eval", "locomo-qa", str(FIXTURE)]) == 2
    err = capsys.readouterr().err.strip()
    assert "eval locomo-qa needs an OpenAI-compatible endpoint" in err and len(err.splitlines()) == 1


def test_a_model_error_is_that_questions_result_and_the_run_goes_on(
    reader: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from openai_stub import StubReply

    monkeypatch.setenv("PERSONALAB_LLM_MAX_RETRIES", "0")
    reader.queue(StubReply(status=500))  # the first question's memory request
    out = tmp_path / "qa"
    assert main(["eval", "locomo-qa", str(FIXTURE), "--conversations", "1", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    first = report["rows"][0]["conditions"]["memory"]
    assert first["reply"] == "" and first["f1"] == 0.0 and "500" in first["error"]
    assert len(report["rows"]) == 6 and report["summary"]["memory"]["model_errors"] == 1
    assert report["summary"]["none"]["model_errors"] == 0
