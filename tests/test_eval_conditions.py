"""`personalab eval run --conditions full,recent,history` (issue 30: does memory help?).

Played through the real ChatOpenAI client against the OpenAI-compatible stub in its extractive-reader mode
(tests/openai_stub.py: it answers with the prompt's statement that best overlaps the question), on SQLite: a fact
told 41 turns back is answered with PersonaLab's memory, not from the recent window alone, and from the whole
history while it fits; the conditions side by side in report.json / report.md and on the console, each failed
probe named with its reply, the exit code 1 when a scenario's goal is missed, `session: new`, and probes that name
their instance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from openai_stub import OpenAIStub, SlowServer, StubReply, openai_stub_fixture, reader_answer  # noqa: F401 - the fixture
from personalab.evals.entry import main

FIXTURES = Path(__file__).parent / "fixtures" / "eval_conditions"


@pytest.fixture(name="reader")
def reader_fixture(openai_stub: OpenAIStub) -> OpenAIStub:
    openai_stub.reader = True
    return openai_stub


def run_eval(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["eval", "run", *argv, "--model", "openai", "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def copy(tmp_path: Path, *names: str) -> list[str]:
    out = []
    for name in names:
        shutil.copy(FIXTURES / name, tmp_path / name)
        out.append(str(tmp_path / name))
    return out


def run_fixture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, *argv: str
) -> tuple[int, str, str, Path]:
    """`eval run` of the fixture scenario `name` (copied into `tmp_path`) with `--out tmp_path/out` and `argv`."""
    [path] = copy(tmp_path, name)
    out = tmp_path / "out"
    code, stdout, err = run_eval(capsys, path, "--out", str(out), *argv)
    return code, stdout, err, out


def conditions(out: Path) -> dict[str, dict[str, Any]]:
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {group["scenario"]: group for group in report["conditions"]}


def test_reader_copies_the_statement_that_answers_and_never_a_question() -> None:
    request = {
        "messages": [
            {"role": "system", "content": "〔PersonaLab任务：reply〕你是阿澄。说话温和。"},
            {"role": "user", "content": "我妹妹叫什么名字？"},
            {"role": "assistant", "content": "【平静】今天天气不错。"},
            {"role": "user", "content": "我妹妹的名字叫林小满。你喝咖啡吗？"},
            {"role": "user", "content": "我妹妹叫什么名字？"},
        ]
    }
    assert reader_answer(request) == "【平静】我妹妹的名字叫林小满。"
    request["messages"] = [m for m in request["messages"] if "林小满" not in m["content"]]
    assert reader_answer(request) == "【平静】我不记得了。"


def test_full_memory_answers_a_fact_40_turns_back_and_the_recent_window_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub
) -> None:
    [path] = copy(tmp_path, "fact_40_back.yaml")
    out = tmp_path / "out"
    code, stdout, err = run_eval(capsys, path, "--out", str(out), "--conditions", "full,recent")
    assert code == 0, stdout + err
    group = conditions(out)["fact_40_back"]
    full, recent = group["conditions"]["full"], group["conditions"]["recent"]
    assert full["memory_use"] == {"used": 1, "scored": 1, "percent": 100.0}
    assert recent["memory_use"] == {"used": 0, "scored": 1, "percent": 0.0}
    goals = {row["figure"]: row["met"] for row in group["goals"]}
    assert goals == {
        "memory use gain, full − recent (points)": True,
        "in character, full (%)": True,
        "in character, recent (%)": True,
        "contradictions, full": True,
    }
    # the replies are kept; the recent window's failed probe is named, with its reply
    assert "林小满" in full["probe_replies"][0]["reply"]
    [failed] = recent["failed_probes"]
    assert failed["probe"] == "我妹妹叫什么名字？" and failed["where"] == "turns[2]"
    assert failed["failed"] == ["reply: 林小满"] and failed["reply"] == "【平静】我不记得了。"
    assert all(s["in_character"]["percent"] == 100.0 for s in group["conditions"].values())
    # with a real model configured the run's judge scored each probe as well (the stub's judge: recalled and used)
    assert full["judge"]["memory_used"] == 1.0 and recent["judge"]["memory_used"] == 0.0
    # every condition played in its own instance and process, on its own data folder: the same 42 turns each
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["meta"]["conditions"] == ["full", "recent"]
    assert sorted(s["name"] for s in report["scenarios"]) == ["fact_40_back@full", "fact_40_back@recent"]
    assert {s["turns"] for s in report["scenarios"]} == {42}
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "## Does memory help? Conditions side by side" in markdown
    assert "| memory use | 100% (1/1) | 0% (0/1) |" in markdown
    assert "Failed probes, **recent**" in markdown and "“我妹妹叫什么名字？”" in markdown
    assert "fact_40_back: full: memory use 100%" in stdout and "recent: memory use 0%" in stdout


def test_no_judge_leaves_the_phrase_checks_and_sends_the_server_no_judge_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a one-request-at-a-time local server keeps one prompt in its cache: a judge's request after a probe would
    # evict the one the next turn reuses
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "3")
    code, stdout, err, out = run_fixture(
        tmp_path, capsys, "fact_in_window.yaml", "--conditions", "full,recent", "--no-judge"
    )
    assert code == 1, stdout + err  # its goal (a gain over the window) is missed, as without --no-judge
    group = conditions(out)["fact_in_window"]
    assert group["conditions"]["full"]["memory_use"]["percent"] == 100.0
    assert all("judge" not in c or not c["judge"] for c in group["conditions"].values())
    assert reader.requests and not any("评审" in str(r["messages"][0]["content"]) for r in reader.requests)
    # the English scenario's prompts are English (the instance has the scenario's language)
    replies = [r for r in reader.requests if "reply〕" in str(r["messages"][0]["content"])]
    assert replies and all("〔PersonaLab task: reply〕" in r["messages"][0]["content"] for r in replies)


def test_a_turn_cut_at_the_deadline_is_counted_and_the_play_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a slow real model misses the deadline now and then (issue 30): the scenario is not abandoned at that turn
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "4")
    reader.queue_for("reply", "【平静】Noted.", StubReply("【平静】Lily Chen, of course.", delay=8))
    # one unit after the other: the delayed reply is the full condition's second
    argv = ("--conditions", "full,recent", "--no-judge", "--parallel", "1")
    code, stdout, err, out = run_fixture(tmp_path, capsys, "cut_probe.yaml", *argv)
    assert code == 0, stdout + err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    unit = next(s for s in report["scenarios"] if s["name"] == "cut_probe@full")
    assert unit["status"] == "ok" and unit["turns"] == 2  # the cut turn does not count, as in the product
    result = json.loads(next((out / "results").glob("cut_probe*full*.json")).read_text(encoding="utf-8"))
    assert [(c["turn"], c["kind"]) for c in result["cut_turns"]] == [(2, "probe")]
    [cut] = result["cut_turns"]  # why it was cut, for whoever reads the result later
    assert cut["deadline"]["cut_after_chars"] == 0 and cut["deadline"]["reply_left_s"] <= 0
    assert cut["server"]["prompt_tokens"] > 0 and cut["retrieved_tokens"] is not None
    first, second = result["probes"]
    assert first["cut"] and first["reply"] == "" and first["in_character"] is None
    assert "Lily Chen" in second["reply"] and second["turn"] == 2
    [group] = report["conditions"]
    full = group["conditions"]["full"]
    assert full["cut_turns"] == 1 and full["memory_use"] == {"used": 1, "scored": 2, "percent": 50.0}
    assert full["in_character"]["scored"] == 1  # the cut probe had no reply to judge
    assert full["failed_probes"][0]["failed"] == ["reply: Lily Chen", "cut at the turn's deadline: no reply"]
    assert group["conditions"]["recent"]["cut_turns"] == 0
    assert "turns cut at the deadline 1" in stdout


def test_a_reply_longer_than_the_time_left_is_ended_at_the_cap_and_the_report_counts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a slow model's long answer: without the cap it streamed past the deadline and the probe had no reply
    monkeypatch.setenv("PERSONALAB_TURN_DEADLINE", "8")
    monkeypatch.setenv("PERSONALAB_QUERY_REWRITE", "rules")
    reader.slow = SlowServer(prompt_per_s=3000, gen_per_s=30, reports_usage=False)
    long_answer = "【平静】Lily Chen, of course. " + "She works nights at the hospital by the harbour. " * 12
    reader.queue_for("reply", "【平静】Noted, I will remember your sister's name.", long_answer, "【平静】Lily Chen.")
    argv = ("--conditions", "full,recent", "--no-judge", "--parallel", "1")  # full first: the queued replies are its
    code, stdout, err, out = run_fixture(tmp_path, capsys, "cut_probe.yaml", *argv)
    result = json.loads(next((out / "results").glob("cut_probe*full*.json")).read_text(encoding="utf-8"))
    assert result["cut_turns"] == []
    [capped] = result["capped_replies"]
    assert capped["turn"] == 2 and capped["reason"].startswith("the time left held about")
    assert capped["kept"] < capped["chars"] < len(long_answer)
    first = result["probes"][0]
    assert "Lily Chen" in first["reply"] and first["reply"].endswith("harbour.")
    [group] = conditions(out).values()
    assert group["conditions"]["full"]["capped_replies"] == 1
    assert "| replies ended at the time cap (whole sentences kept) | 1 |" in (out / "report.md").read_text("utf-8")


def test_a_probe_answered_by_repeating_it_is_asked_again_and_the_report_counts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub
) -> None:
    # a small local model says the question back (issue 30): the turn asks once more, the report says how often
    reader.queue_for("reply", "【平静】Noted.", "【平静】What is my sister's name?", "【平静】Lily Chen, of course.")
    argv = ("--conditions", "full,recent", "--no-judge", "--parallel", "1")  # full first: the queued replies are its
    code, stdout, err, out = run_fixture(tmp_path, capsys, "cut_probe.yaml", *argv)
    assert code == 0, stdout + err
    result = json.loads(next((out / "results").glob("cut_probe*full*.json")).read_text(encoding="utf-8"))
    [echo] = result["echoes"]
    assert (echo["turn"], echo["status"]) == (2, "asked once more with the note after the input")
    assert echo["first_reply"] == "【平静】What is my sister's name?"
    first, second = result["probes"]
    assert "Lily Chen" in first["reply"] and "Lily Chen" in second["reply"]
    [group] = conditions(out).values()
    assert group["conditions"]["full"]["echoes"] == {"asked_again": 1, "kept": 0, "own_line": 0}
    assert "| replies repeating the input or an own line: asked again / kept (of them own lines) | 1 / 0 (0) |" in (
        out / "report.md"
    ).read_text("utf-8")


def test_a_missed_goal_exits_1_and_probes_name_their_instance_and_sitting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "3")  # a short recent window: 7 turns back is out of it
    paths = copy(tmp_path, "two_sittings.yaml", "fact_in_window.yaml")
    out, data = tmp_path / "out", tmp_path / "data"
    code, stdout, err = run_eval(
        capsys, *paths, "--out", str(out), "--data-dir", str(data), "--conditions", "full,recent,history"
    )
    assert code == 1, stdout + err
    groups = conditions(out)
    # the fact still in the window: recent answers it too, the gain is 0 and the goal is missed
    window = groups["fact_in_window"]
    assert window["conditions"]["recent"]["memory_use"]["percent"] == 100.0
    assert [row["met"] for row in window["goals"]] == [False]
    assert "GOAL MISSED fact_in_window: memory use gain, full − recent (points): 0 (100% − 100%) (goal ≥ 30)" in stdout
    # each probe played in the instance it names; instance 2's in a new sitting, and answered there from memory
    two = groups["two_sittings"]
    assert [row["met"] for row in two["goals"]] == [True]
    full, recent, history = (two["conditions"][name] for name in ("full", "recent", "history"))
    # the whole history in the prompt (it fits the window here) answers both, and says it fitted
    assert history["memory_use"]["percent"] == 100.0 and history["history_not_fit"] == 0
    assert all(p["history_fit"] for p in history["probe_replies"])
    assert [(p["instance"], p["turn"]) for p in full["probe_replies"]] == [(1, 8), (2, 8)]
    assert "林小满" in full["probe_replies"][0]["reply"] and "豆包" in full["probe_replies"][1]["reply"]
    assert "豆包" not in full["probe_replies"][0]["reply"]  # instance 1 never heard of the dog
    assert [(p["instance"], p["failed"]) for p in recent["failed_probes"]] == [
        (1, ["reply: 林小满"]),
        (2, ["reply: 豆包"]),
    ]
    from personalab.graph.api import PersonaLab

    result = json.loads(next((out / "results").glob("two_sittings*full*.json")).read_text(encoding="utf-8"))
    folder = next(p for p in data.iterdir() if p.name.startswith("two_sittings") and "full" in p.name)
    api = PersonaLab(database_url=f"sqlite:///{folder / 'personalab.db'}")
    instances = [i.id for i in api.instances.list()]
    assert result["instances"] == 2
    sittings = {iid: len(api.dialogue.sessions(iid)) for iid in instances}
    assert sorted(sittings.values()) == [1, 2], sittings  # instance 2's probe started its second sitting


def test_conditions_through_one_shot_cli_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], reader: OpenAIStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONALAB_RECALL_TURNS", "2")
    code, stdout, err, out = run_fixture(
        tmp_path, capsys, "cli_small.yaml", "--conditions", "full,recent", "--via", "cli"
    )
    assert code == 0, stdout + err
    group = conditions(out)["cli_small"]
    assert group["conditions"]["full"]["memory_use"]["percent"] == 100.0
    assert group["conditions"]["recent"]["memory_use"]["percent"] == 0.0
    assert [row["met"] for row in group["goals"]] == [True]
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert {s["via"] for s in report["scenarios"]} == {"cli"}


def test_shipped_memory_scenarios_tell_facts_20_to_60_turns_before_their_probes() -> None:
    from personalab.evals.scenario import expand_turns, load_scenarios

    scenarios = {s.name: s for s in load_scenarios(["shipped/memory"])}
    assert {s.language for s in scenarios.values()} == {"zh", "en"}
    for scenario in scenarios.values():
        assert scenario.goals is not None and scenario.goals.memory_use_gain_points == 30
        steps = expand_turns(scenario)
        probes = [(turn, step) for turn, step in enumerate(steps, start=1) if step.kind == "probe"]
        assert probes and any(step.session for _, step in probes)
        for turn, step in probes:
            assert step.expect is not None and step.expect.reply and step.expect.contradicts
            told = [t for t, s in enumerate(steps[: turn - 1], start=1) if step.expect.reply[0] in s.message]
            assert told and 20 <= turn - told[-1] <= 60, (scenario.name, step.message)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--conditions", "full,nothing"], "--conditions: unknown condition 'nothing'; one of full, recent, history"),
        (["--conditions", ","], "--conditions names no condition"),
        (["--judge", "--no-judge"], "--judge and --no-judge: give one of them"),
    ],
)
def test_bad_conditions_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    [path] = copy(tmp_path, "fact_in_window.yaml")
    code = main(["eval", "run", path, "--out", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and problem in err


def test_a_probe_naming_an_instance_the_scenario_lacks_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    text = (FIXTURES / "fact_in_window.yaml").read_text(encoding="utf-8")
    path.write_text(
        text.replace("  - probe: What is my sister's name?", "  - instance: 2\n    probe: What is my sister's name?"),
        encoding="utf-8",
    )
    code = main(["eval", "run", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "s.yaml: at turns[1].instance: instance 2 but the scenario plays 1 instance(s)" in err


@pytest.mark.parametrize("mode", ["recent", "history"])
def test_the_memory_mode_knob_keeps_long_term_memory_out_of_the_prompt(sqlite_url: str, mode: str) -> None:
    """The run knob the conditions play with (nodes/context.py memory_mode), on one instance with the scripted
    model: no retrieval, no query rewrite, no core-memory rewrite; `history` keeps every turn although the recent
    window is one turn."""
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context

    instance = create_sample_instance(sqlite_url)
    ctx = Context(database_url=sqlite_url, memory_mode=mode, recall_turns=1, maintenance_every=2)  # type: ignore[arg-type]
    said = ["我妹妹叫林小满。", "今天风很大。", "我们歇一会儿吧。", "我妹妹叫什么？"]
    with turn_graph(ctx) as (graph, ctx):
        states = [run_turn(graph, ctx, instance, text) for text in said]
    last = states[-1]
    debug = last["debug"]
    assert debug["retrieval"]["status"] == f"off (memory_mode {mode})"
    assert debug["query_rewrite"]["status"] == f"off (memory_mode {mode})"
    assert not any("maintenance" in (s["debug"].get("timings_ms") or {}) for s in states)
    prompt = "\n".join(m["content"] for m in last["prompt"])
    assert not [m for m in last["prompt"] if m["region"] == "retrieved" and "林小满" in m["content"]]
    assert ("林小满" in prompt) is (mode == "history")


def test_history_keeps_what_fits_the_window_and_the_report_says_what_did_not(sqlite_url: str) -> None:
    from personalab.evals.report import condition_summary, conditions_markdown
    from personalab.graph.runner import create_sample_instance, run_turn, turn_graph
    from personalab.nodes.context import Context

    instance = create_sample_instance(sqlite_url)
    ctx = Context(database_url=sqlite_url, memory_mode="history", context_tokens=4000, max_reply_tokens=300)
    long = "这一路上的风景很长很长，" * 20
    with turn_graph(ctx) as (graph, ctx):
        states = [run_turn(graph, ctx, instance, f"第{i}句：{long}") for i in range(12)]
    prompt = "\n".join(m["content"] for m in states[-1]["prompt"])
    kept = [f"第{i}句" in prompt for i in range(12)]
    assert not kept[0] and kept[-1] and kept == sorted(kept)  # the oldest turns left out first, the newest kept
    # a history probe that lost earlier lines is named as such in the report
    probe = {
        "instance": 1,
        "turn": 12,
        "where": "turns[3]",
        "probe": "第0句说了什么？",
        "checks": [{"kind": "reply", "phrase": "第0句", "ok": False}],
        "reply": "【平静】我不记得了。",
        "in_character": {"ok": True, "formatted": True, "ooc_markers": []},
        "history_fit": False,
        "history_missing": 5,
    }
    summary = condition_summary({"condition": "history", "status": "ok", "probes": [probe]})
    assert summary["history_not_fit"] == 1
    assert summary["failed_probes"][0]["failed"] == [
        "reply: 第0句",
        "history did not fit the window (5 user line(s) left out)",
    ]
    text = "\n".join(conditions_markdown([{"scenario": "s", "conditions": {"history": summary}, "goals": []}]))
    assert "| history did not fit | 1 |" in text and "Reply: “【平静】我不记得了。”" in text


def test_a_reply_repeating_the_users_message_is_out_of_character() -> None:
    from personalab.evals.play import echoes_user, in_character
    from personalab.evals.report import condition_summary

    # a small local model answered the user's question with the question itself (issue 30)
    state = {
        "reply": "雷娜，据点的守卫换班是什么时候？",
        "reply_raw": "【紧张】雷娜，据点的守卫换班是什么时候？(往后退了一步)",
    }
    verdict = in_character(state, "据点的守卫换班是什么时候？")
    assert verdict == {"ok": False, "formatted": True, "ooc_markers": [], "echo": True}
    assert echoes_user("【担心】Where did I hide the spare fuel can?", "where did I hide the spare FUEL can")
    assert not echoes_user(
        "【平静】You hid it under the blue tarp behind the chapel.", "Where did I hide the spare fuel can?"
    )
    assert not echoes_user("【平静】好的。", "好的")  # a short message may be said back in character
    assert in_character(state)["ok"]  # without the message (the turn's state alone) only format and markers count
    probe = {
        "instance": 1,
        "turn": 3,
        "where": "turns[2]",
        "probe": "据点的守卫换班是什么时候？",
        "checks": [],
        "reply": state["reply"],
        "in_character": verdict,
    }
    summary = condition_summary({"condition": "full", "status": "ok", "probes": [probe]})
    assert summary["in_character"]["percent"] == 0.0
    assert summary["failed_probes"][0]["failed"] == ["out of character: repeats the user's message"]


def test_memory_mode_is_a_run_knob_of_the_served_context() -> None:
    from personalab.nodes.context import validate_run_context
    from personalab.nodes.rules.errors import InvalidInput

    assert validate_run_context({"memory_mode": "recent"}) == {"memory_mode": "recent"}
    with pytest.raises(InvalidInput, match="context.memory_mode: Input should be 'full', 'recent' or 'history'"):
        validate_run_context({"memory_mode": "none"})
