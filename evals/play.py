"""Playing scenarios through the real turn graph (issue 12: batch evaluation runs) and scoring each turn.

Each scenario gets its own character and background (so its director archive, one Chroma collection per
character + background, and its memories are its own), world-book / knowledge entries, and `instances` conversation
instances. Secrets are said first, in their instance; then the script's steps are played in lockstep: step k in
instance 1, 2, …, N, then step k + 1. How a turn is played is `--via` (evals/via.py): in this process through
`graph.runner.run_turn` on the same compiled graph and checkpointer as the CLI, the demo and the benchmarks (after each
turn the writes it queued are flushed, so a probe sees every earlier turn's writes and runs stay deterministic), as
one `personalab turn --json` process per turn, or through the served graph (`langgraph dev`); every way gives the
turn's final state (reply, prompt with its regions, debug), scored the same way.

A scenario is one unit of parallel work: `evals.runs` plays each in a process of its own on a data folder of its
own (`evals.worker`), several at a time (`--parallel`), and the instances of one scenario play in one thread, so
what one instance's director may see of another's events does not depend on thread timing. With the scripted
model the same scenario gives the same scores.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages.utils import count_tokens_approximately
from personalab.evals.report import PROCESS
from personalab.evals.scenario import Scenario, Step, expand_turns
from personalab.evals.via import Turns
from personalab.graph.runner import load_sample
from personalab.nodes.rules.plot import extract_progress
from personalab.stores.db import session_scope
from personalab.stores.saves import create_background, create_role, create_save
from personalab.stores.worldbook import Scope, add_knowledge, add_worldbook_entry

CHARS_PER_TOKEN = 1.5  # the product's counter (nodes/rules/prompt_assembly.py RegionBudgets)


class Interrupted(Exception):
    """The run was asked to stop (Ctrl-C) between two turns."""


def tokens(messages: Sequence[dict[str, Any]]) -> int:
    plain = [{"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in messages]
    return int(count_tokens_approximately(plain, chars_per_token=CHARS_PER_TOKEN)) if plain else 0


# --- setting a scenario up ----------------------------------------------------------------------------------


def _character_fields(spec: dict[str, Any]) -> dict[str, str]:
    if "sample" in spec:
        role = load_sample(f"{spec['sample']}.json")["role"]
        return {k: str(role.get(k, "")) for k in ("name", "description", "persona")}
    return {k: str(spec.get(k, "")) for k in ("name", "description", "persona")}


def _background_fields(spec: dict[str, Any]) -> tuple[str, str, list[str]]:
    if "sample" in spec:
        background = load_sample(f"{spec['sample']}.json")["background"]
        return background["name"], background["world_setting"], list(background["outline"])
    return spec["name"], spec.get("world", ""), list(spec["outline"])


def _sample_exists(spec: dict[str, Any], what: str, source: str) -> None:
    from personalab.nodes.rules.errors import InvalidInput

    if "sample" in spec:
        try:
            load_sample(f"{spec['sample']}.json")
        except FileNotFoundError:
            raise InvalidInput(f"{source}: at {what}.sample: no shipped sample {spec['sample']!r}") from None


def check_samples(scenario: Scenario) -> None:
    """The samples a scenario names exist (part of validating it before anything runs)."""
    _sample_exists(scenario.character, "character", scenario.source)
    _sample_exists(scenario.background, "background", scenario.source)


@dataclass
class Setup:
    role_id: int
    background_id: int
    outline: list[str]
    instances: list[int]


def set_up(scenario: Scenario) -> Setup:
    """The scenario's character, background, world-book and knowledge entries, and its instances."""
    character = _character_fields(scenario.character)
    name, world, outline = _background_fields(scenario.background)
    with session_scope() as session:
        role = create_role(
            session, character["name"], description=character["description"], persona=character["persona"]
        )
        background = create_background(session, f"{name} · {scenario.name}", world, outline)
        assert role.id is not None and background.id is not None
        role_id, background_id = role.id, background.id
        instances = []
        for number in range(1, scenario.instances + 1):
            save = create_save(session, role_id, background_id, title=f"{scenario.name} #{number}")
            # the prompt's own scaffolding in the scenario's language (issue 28): without it an English scenario
            # played with the Chinese one, and a real model answered it in Chinese (issue 30's runs)
            save.language = scenario.language
            assert save.id is not None
            instances.append(save.id)
        for index, entry in enumerate(scenario.worldbook):
            fields = {k: v for k, v in entry.items() if k not in ("content", "scope")}
            if "keywords" in fields:
                fields["keywords"] = tuple(fields["keywords"])
            scopes = (
                [Scope(save_id=i) for i in instances] if entry.get("scope") == "instance" else [Scope(role_id=role_id)]
            )
            for scope in scopes:
                try:
                    add_worldbook_entry(session, entry["content"], scope=scope, **fields)
                except ValueError as exc:
                    from personalab.nodes.rules.errors import InvalidInput

                    raise InvalidInput(f"{scenario.source}: at worldbook[{index}]: {exc}") from None
        memories = list(scenario.memories)
        for entry in scenario.knowledge:
            add_knowledge(
                session,
                entry["tag"],
                entry["content"],
                importance=float(entry.get("importance", 0.5)),
                keywords=tuple(entry.get("keywords", ())),
                scope=Scope(role_id=role_id),
            )
    if memories:  # issue 26: stored before the first turn, no witnesses recorded (the character's own)
        from personalab.stores.memory import MemoryStore
        from personalab.stores.vectors import chroma_path

        store = MemoryStore(chroma_path=chroma_path())
        for instance_id in instances:
            for memory in memories:
                store.add_memory(instance_id, memory.content, type=memory.type, importance=memory.importance, turn=0)
    return Setup(role_id, background_id, outline, instances)


# --- one instance's running record ----------------------------------------------------------------------------


@dataclass
class InstanceLog:
    number: int  # 1-based within the scenario
    instance_id: int
    turn: int = 0
    said: list[tuple[int, str]] = field(default_factory=list)  # (turn, user + host text) for fact distances
    history_tokens: int = 0
    last_marker_turn: int = 0
    fallback_turns: list[int] = field(default_factory=list)
    marker_turns: list[int] = field(default_factory=list)
    series: list[dict[str, Any]] = field(default_factory=list)
    completed: int = 0
    users: list[str] = field(default_factory=list)  # the user lines played, oldest first
    users_told: list[str] = field(default_factory=list)  # the scenario's own user lines (no filler, no probe)

    def fact_turn(self, phrase: str) -> int | None:
        """The latest earlier turn whose user or host lines hold `phrase`."""
        needle = phrase.casefold()
        for turn, text in reversed(self.said):
            if needle in text.casefold():
                return turn
        return None


def _contains(haystack: str, phrase: str) -> bool:
    return phrase.casefold() in haystack.casefold()


# issue 30: a reply out of character — the model speaking as a model, a note to the user, the prompt's own format
# template or chat-template tokens left in the reply
OOC_MARKERS: tuple[str, ...] = (
    "作为AI",
    "作为一个AI",
    "作为人工智能",
    "我是一个人工智能",
    "AI助手",
    "语言模型",
    "as an ai",
    "language model",
    "(ooc",
    "（ooc",
    "[ooc",
    "ooc:",
    "（注：",
    "(note:",
    "<|im_",
    "‹",
    "{{char}}",
    "{{user}}",
)
# a reply's leading 【emotion】 (seed 002's format), also stripped from LoCoMo answers before scoring
EMOTION_PREFIX_RE = re.compile(r"^\s*【[^】\n]{1,12}】")


_NOT_A_WORD_RE = re.compile(r"[\W_]+")
ECHO_MIN_CHARS = 6  # a shorter message ("好的。", "OK") may be repeated by a reply in character


def echoes_user(reply: str, message: str) -> bool:
    """The reply repeats the user's whole message (punctuation, spaces and case aside): the model speaking the
    user's line instead of the character's, which seed 002's instruction forbids (a small local model's failure,
    issue 30: "雷娜，据点的守卫换班是什么时候？" answered with the same words)."""
    asked = _NOT_A_WORD_RE.sub("", message.casefold())
    said = _NOT_A_WORD_RE.sub("", EMOTION_PREFIX_RE.sub("", reply).casefold())
    return len(asked) >= ECHO_MIN_CHARS and asked in said


def in_character(state: dict[str, Any], message: str = "") -> dict[str, Any]:
    """Does the reply stay in character (issue 30): the seed's 【emotion】 format, no out-of-character marker, and
    not the user's own message repeated (`echoes_user`)."""
    reply = str(state.get("reply") or "")
    raw = str(state.get("reply_raw") or reply)
    formatted = any(segment.get("original_emotion") for segment in state.get("reply_lines") or []) or bool(
        EMOTION_PREFIX_RE.match(raw)
    )
    markers = [marker for marker in OOC_MARKERS if _contains(raw, marker)]
    echo = bool(message) and echoes_user(reply, message)
    return {"ok": formatted and not markers and not echo, "formatted": formatted, "ooc_markers": markers, "echo": echo}


def recent_dialogue(prompt: Sequence[dict[str, Any]]) -> str:
    """The prompt's recent-dialogue window: the user and character messages of its middle region (seed 002 Prompt区域
    分配: recall memory; the region's system messages are the world setting and the example dialogue), without the
    turn's own message (the last one)."""
    return "\n".join(
        str(m.get("content", ""))
        for m in prompt[:-1]
        if m.get("region") == "middle" and m.get("role") in ("user", "assistant")
    )


def found_where(retrieved: str, window: str, phrase: str) -> str | None:
    """Where a probe's fact reached the model: ``retrieved`` (the retrieved region: long-term memory, the dialogue
    record, world knowledge), else ``recent_window`` (the exchange is still in the recent dialogue, which the
    retrieved region does not repeat, issue 26), else None (the model does not see it)."""
    if _contains(retrieved, phrase):
        return "retrieved"
    if _contains(window, phrase):
        return "recent_window"
    return None


def score_probe(step: Step, state: dict[str, Any], log: InstanceLog) -> list[dict[str, Any]]:
    """The probe's checks: retrieved (the fact reaches the model: in the prompt's retrieved region, or still in its
    recent-dialogue window — `where` says which, and the report counts the window's apart), prompt_lacks (nowhere
    in the prompt), reply (in the reply); each `retrieved` check with its distance to the fact's turn."""
    assert step.expect is not None
    prompt = state.get("prompt") or []
    retrieved = "\n".join(str(m.get("content", "")) for m in prompt if m.get("region") == "retrieved")
    window = recent_dialogue(prompt)
    whole = "\n".join(str(m.get("content", "")) for m in prompt)
    reply = str(state.get("reply") or "")
    checks: list[dict[str, Any]] = []
    for phrase in step.expect.retrieved:
        source = log.fact_turn(phrase)
        where = found_where(retrieved, window, phrase)
        checks.append(
            {
                "kind": "retrieved",
                "phrase": phrase,
                # the model sees the fact either way; a hit in the window is counted apart (`where`), never silently
                "ok": where is not None,
                "where": where,
                "fact_turn": source,
                "distance": None if source is None else log.turn - source,
                "in_prompt": _contains(whole, phrase),
            }
        )
    for phrase in step.expect.prompt_lacks:
        checks.append({"kind": "prompt_lacks", "phrase": phrase, "ok": not _contains(whole, phrase)})
    for phrase in step.expect.reply:
        checks.append({"kind": "reply", "phrase": phrase, "ok": _contains(reply, phrase)})
    for phrase in step.expect.contradicts:
        checks.append({"kind": "contradicts", "phrase": phrase, "ok": not _contains(reply, phrase)})
    if step.expect.order:  # issue 26: the current truth before the past
        places = [retrieved.casefold().find(phrase.casefold()) for phrase in step.expect.order]
        ok = all(place >= 0 for place in places) and places == sorted(places)
        checks.append({"kind": "order", "phrase": " < ".join(step.expect.order), "ok": ok, "places": places})
    inner, outside = private_parts(prompt)
    for phrase in step.expect.private:
        checks.append(
            {"kind": "private", "phrase": phrase, "ok": _contains(inner, phrase) and not _contains(outside, phrase)}
        )
    return checks


def private_parts(prompt: Sequence[dict[str, Any]]) -> tuple[str, str]:
    """The prompt's text split (issue 26): the private block (from `PRIVATE_HEADER` to the next block's header) and
    everything else but the turn's own user message (the last message)."""
    from personalab.nodes.rules.curation import PRIVATE_HEADER

    inner: list[str] = []
    outside: list[str] = []
    for message in prompt[:-1]:
        text = str(message.get("content", ""))
        while PRIVATE_HEADER in text:
            before, _, rest = text.partition(PRIVATE_HEADER)
            after = rest.find("\n=== ")
            outside.append(before)
            inner.append(rest if after < 0 else rest[:after])
            text = "" if after < 0 else rest[after:]
        outside.append(text)
    return "\n".join(inner), "\n".join(outside)


def repeated_lines(prompt: Sequence[dict[str, Any]], lines: Sequence[str]) -> list[dict[str, Any]]:
    """Issue 26 (each exchange once): the user's `lines` a prompt shows more than once — each occurrence in the
    retrieved region, plus one when the rest of the prompt (the recent dialogue; not the turn's own message) has it."""
    retrieved = "\n".join(str(m.get("content", "")) for m in prompt if m.get("region") == "retrieved")
    rest = "\n".join(str(m.get("content", "")) for m in prompt[:-1] if m.get("region") != "retrieved")
    out = []
    for line in dict.fromkeys(text.strip() for text in lines if text.strip()):
        count = retrieved.count(line) + (1 if line in rest else 0)
        if count > 1:
            out.append({"line": line, "count": count})
    return out


# --- playing ---------------------------------------------------------------------------------------------------


@dataclass
class PlayOptions:
    user_name: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    on_turn: Callable[[], None] | None = None
    judge: Any = None  # evals.judge.Judge or None
    condition: str = "full"  # issue 30: the memory condition played (the turns' Context.memory_mode)


class TurnFailed(Exception):
    pass


def play_scenario(
    scenario: Scenario, open_turns: Callable[[], AbstractContextManager[Turns]], options: PlayOptions
) -> dict[str, Any]:
    """Play `scenario` and return its result (status ok / failed / interrupted with everything measured).
    `open_turns` opens the way its turns are played (evals.via: in this process, one `personalab turn` process
    each, or the served graph), once the scenario is set up."""
    started = time.perf_counter()
    steps = expand_turns(scenario)
    result: dict[str, Any] = {
        "name": scenario.name,
        "source": scenario.source,
        "description": scenario.description,
        "language": scenario.language,
        "instances": scenario.instances,
        "steps": len(steps),
        "status": "ok",
        "error": None,
        "probes": [],
        # issue 30: turns a real model did not answer within the turn's deadline (the product stores no reply)
        "cut_turns": [],
        # issue 30: replies that only repeated the user's input (nodes/rules/echo.py): asked once more, or kept
        "echoes": [],
        # issue 30: replies a slow model ended at the time cap (nodes/rules/deadline.py), kept in whole sentences
        "capped_replies": [],
        "secrets": {"said": len(scenario.secrets), "leaks": []},
        # memories of the long-term memory in the prompt, and those whose instance is not the turn's (goal 0)
        "other_instances": {"memories": 0, "foreign": []},
        # issue 26: the user's lines shown twice in a prompt, private memories outside their block, memories
        # retrieved for a character or NPC that did not witness them
        "duplicates": [],
        "private_sayable": [],
        "witnesses": {"checked": 0, "unwitnessed": []},
        "maintenance": {"accepted": 0, "rejected": 0, "errors": 0},
        "forged_markers": {"sent": 0, "honoured": 0},
        "retrieval_timeouts": 0,
        "timings_ms": {},
        "judge": [],
        "model": None,
        "condition": options.condition,
        "goals": scenario.goals.model_dump(exclude_none=True) if scenario.goals else None,
    }
    try:
        setup = set_up(scenario)
    except Exception as exc:  # noqa: BLE001 - reported as the scenario's failure, like a failed turn
        result["status"], result["error"] = "failed", f"{scenario.source}: set-up: {type(exc).__name__}: {exc}"
        result["turns_played"], result["wall_s"] = 0, round(time.perf_counter() - started, 2)
        return result
    result["outline_points"] = len(setup.outline)
    logs = [InstanceLog(number, iid) for number, iid in enumerate(setup.instances, start=1)]
    plan: list[tuple[Step, list[InstanceLog]]] = []
    for secret in scenario.secrets:
        plan.append((Step(kind="secret", message=secret.user, where="secrets"), [logs[secret.instance - 1]]))
    # a step naming an instance is played in that instance only (issue 30)
    plan.extend((step, [logs[step.instance - 1]] if step.instance else logs) for step in steps)
    user_name = scenario.user_name or options.user_name
    stall_turns = 0
    try:
        with open_turns() as turns:
            result["via"], stall_turns = turns.via, turns.stall_turns
            for step, players in plan:
                for log in players:
                    if options.stop.is_set():
                        raise Interrupted()
                    _one_turn(scenario, turns, step, log, user_name, setup, result, options)
                    if options.on_turn:
                        options.on_turn()
    except Interrupted:
        result["status"] = "interrupted"
    except TurnFailed as exc:
        result["status"], result["error"] = "failed", str(exc)
    except Exception as exc:  # noqa: BLE001 - one scenario's error (bad input, a bug) must not stop the others
        result["status"], result["error"] = "failed", f"{scenario.source}: {type(exc).__name__}: {exc}"
    result["turns_played"] = sum(log.turn for log in logs)
    result["director"] = _director_summary(logs, len(setup.outline), stall_turns)
    result["series"] = {str(log.number): log.series for log in logs}
    result["wall_s"] = round(time.perf_counter() - started, 2)
    return result


def cut_reasons(state: Mapping[str, Any]) -> dict[str, Any]:
    """What a cut turn's debug output says about why it was cut (issue 30), kept with the cut in the result: the
    prompt the server was sent (its tokens, of them new past its cache, seconds to the first chunk), the reply's
    share of the deadline, the memory block given up to fit the model's speed, and the window's notes."""
    debug = state.get("debug") or {}
    prompt = debug.get("prompt") or {}
    return {
        "server": debug.get("server"),
        "deadline": debug.get("deadline"),
        "slow_model": debug.get("slow_model"),
        "retrieved_tokens": (prompt.get("retrieved") or {}).get("tokens"),
        "window_notes": (prompt.get("window") or {}).get("notes") or [],
    }


def _cut_turn(step: Step, state: dict[str, Any], log: InstanceLog, result: dict[str, Any]) -> None:
    """A reply cut at the turn's deadline (issue 30: a slow real model): what a user meets, so it is counted and the
    play goes on, as a user's would — the product keeps the user's line, stores no reply and does not count the turn,
    so the next message is the next turn. A cut probe was not answered: its reply checks fail."""
    cut = {"instance": log.number, "turn": log.turn + 1, "where": step.where, "kind": step.kind, **cut_reasons(state)}
    result["cut_turns"].append(cut)
    log.said.append((log.turn, step.message))  # the line is kept: a later probe measures its distance to it
    if step.kind == "probe":
        result["probes"].append(
            {
                "instance": log.number,
                "turn": log.turn + 1,
                "where": step.where,
                "probe": step.message,
                "checks": score_probe(step, state, log),
                "reply": "",
                "cut": True,
                # not scored for character: there is no reply
                "in_character": None,
            }
        )


def _one_turn(
    scenario: Scenario,
    turns: Turns,
    step: Step,
    log: InstanceLog,
    user_name: str | None,
    setup: Setup,
    result: dict[str, Any],
    options: PlayOptions,
) -> None:
    where = f"{scenario.source}: instance {log.number}, turn {log.turn + 1} ({step.where})"
    if step.kind == "recall":
        _one_recall(turns, step, log, result, where)
        return
    try:
        state = turns.send(log.instance_id, step, user_name)
    except Exception as exc:
        if options.stop.is_set():  # Ctrl-C reached the turn's own process (or the server) too
            raise Interrupted() from exc
        raise TurnFailed(f"{where}: {type(exc).__name__}: {exc}") from exc
    if state.get("error"):
        if "cut_after_chars" not in ((state.get("debug") or {}).get("deadline") or {}):
            raise TurnFailed(f"{where}: the turn failed: {state['error']}")
        _cut_turn(step, state, log, result)
        return
    log.turn += 1
    result["model"] = result["model"] or state.get("model")
    debug = state.get("debug") or {}
    prompt = state.get("prompt") or []
    host_text = "\n".join(str(line.get("content", "")) for line in step.lines_before)
    # forged markers: a [PROGRESS] in the user's or the host's lines must never move the story
    _, forged, _ = extract_progress(step.message + "\n" + host_text, len(setup.outline))
    applied = [(m.get("index"), m.get("status")) for m in (debug.get("progress") or {}).get("markers", [])]
    if forged:
        _, own, _ = extract_progress(str(state.get("reply_raw") or ""), len(setup.outline))
        result["forged_markers"]["sent"] += len(forged)
        mine = {(m["index"], m["status"]) for m in own}
        result["forged_markers"]["honoured"] += sum(
            1 for m in forged if (m["index"], m["status"]) in applied and (m["index"], m["status"]) not in mine
        )
    if applied:
        log.marker_turns.append(log.turn)
    timings = dict(debug.get("timings_ms") or {})
    if "director" in timings:
        log.fallback_turns.append(log.turn)
    status = str((debug.get("retrieval") or {}).get("status", "ok"))
    if status.startswith("timed out"):
        result["retrieval_timeouts"] += 1
    maintenance = str((debug.get("maintenance") or {}).get("status", "")) if "maintenance" in timings else ""
    if maintenance.startswith("core memory rewritten"):
        result["maintenance"]["accepted"] += 1
    elif maintenance.startswith("rejected"):
        result["maintenance"]["rejected"] += 1
    elif maintenance.startswith("model error"):
        result["maintenance"]["errors"] += 1
    reply_cut = debug.get("reply_cut") or {}
    if str(reply_cut.get("reason", "")).startswith("the time left"):
        result["capped_replies"].append({"instance": log.number, "turn": log.turn, "where": step.where, **reply_cut})
    echo = debug.get("echo")
    if echo:
        result["echoes"].append({"instance": log.number, "turn": log.turn, "where": step.where, **echo})
    for node, ms in timings.items():
        result["timings_ms"].setdefault(node, []).append(ms)
    result["timings_ms"].setdefault("total", []).append(debug.get("total_ms", 0.0))
    if "process_ms" in debug:  # --via cli: the whole `personalab turn` process, start-up included (issue 29)
        result["timings_ms"].setdefault(PROCESS, []).append(debug["process_ms"])
    whole = "\n".join(str(m.get("content", "")) for m in prompt)
    for index, secret in enumerate(scenario.secrets):
        if secret.instance != log.number and _contains(whole, secret.needle):
            regions = sorted(
                {str(m.get("region")) for m in prompt if _contains(str(m.get("content", "")), secret.needle)}
            )
            result["secrets"]["leaks"].append(
                {"secret": index, "instance": log.number, "turn": log.turn, "regions": regions}
            )
    _count_foreign_memories(state, log, result["other_instances"], result["witnesses"], setup.role_id)
    for found in repeated_lines(prompt, log.users_told):
        result["duplicates"].append({"instance": log.number, "turn": log.turn, **found})
    _, outside = private_parts(prompt)
    for memory in scenario.memories:
        if memory.type == "internal" and _contains(outside, memory.content):
            result["private_sayable"].append({"instance": log.number, "turn": log.turn, "memory": memory.content})
    if step.kind == "probe":
        checks = score_probe(step, state, log)
        probe = {
            "instance": log.number,
            "turn": log.turn,
            "where": step.where,
            "probe": step.message,
            "checks": checks,
            "reply": str(state.get("reply") or ""),  # kept to read later (issue 30)
            "in_character": in_character(state, step.message),
        }
        if options.condition == "history":
            # the whole history condition: did every earlier user line fit in the prompt's window?
            missing = [text for text in dict.fromkeys(log.users) if not _contains(whole, text)]
            probe["history_fit"] = not missing
            probe["history_missing"] = len(missing)
        if options.judge is not None:
            probe["judge"] = options.judge.score(scenario, step, state)
            result["judge"].append(probe["judge"])
        result["probes"].append(probe)
    # what this turn put into the dialogue: the facts a later probe measures its distance to, and the history
    log.said.append((log.turn, step.message + "\n" + host_text))
    log.users.append(step.message)
    if step.kind == "user":
        log.users_told.append(step.message)
    played = [*({"role": "user", "content": line.get("content", "")} for line in step.lines_before)]
    played += [{"role": "user", "content": step.message}, {"role": "assistant", "content": state.get("reply") or ""}]
    log.history_tokens += tokens(played)
    plot = state.get("plot_state") or {}
    log.completed = sum(1 for p in plot.get("story_outline", []) if p.get("status") == "completed")
    relationship = state.get("relationship") or {}
    log.series.append(
        {
            "turn": log.turn,
            "kind": step.kind,
            "prompt_tokens": tokens(prompt),
            "history_tokens": log.history_tokens,
            "completed": log.completed,
            "plot_index": plot.get("current_plot_index"),
            "trust": relationship.get("trust", 0),
            "affection": relationship.get("affection", 0),
            "familiarity": relationship.get("familiarity", 0),
            "fallback": "director" in timings,
            # what a real model's reply looks like (issue 17): the seed's 【emotion】 format, a progress marker
            "formatted": any(segment.get("original_emotion") for segment in state.get("reply_lines") or []),
            # its prompt reminded the model of the format: its last line had none (issue 30)
            "format_note": bool(((debug.get("prompt") or {}).get("tail") or {}).get("format_note")),
            "marker": bool((debug.get("progress") or {}).get("markers")),
            "rss_mb": turns.rss_mb(),
            "total_ms": debug.get("total_ms", 0.0),
            "process_ms": debug.get("process_ms"),
        }
    )


def _memory_rows(ids: Sequence[int]) -> dict[int, tuple[int, Sequence[Any] | None]]:
    """Each memory's (instance, witnesses), read from the scenario's database."""
    from personalab.stores.memory_tables import MemoryEntry
    from sqlmodel import col, select

    with session_scope() as session:
        rows = session.exec(
            select(MemoryEntry.id, MemoryEntry.instance_id, MemoryEntry.witnesses).where(col(MemoryEntry.id).in_(ids))
        ).all()
    return {int(row[0] or 0): (int(row[1]), row[2]) for row in rows}


def _unwitnessed(
    ids: Sequence[int], who: str, log: InstanceLog, witnesses: dict[str, Any], rows: dict[int, tuple[int, Any]]
) -> None:
    """Issue 26: count the memories retrieved for `who` (the character or an NPC) that it did not witness."""
    from personalab.nodes.rules.curation import witnessed_by

    witnesses["checked"] += len(ids)
    for memory_id in ids:
        seen = rows.get(memory_id, (0, None))[1]
        if not witnessed_by(seen, who):
            witnesses["unwitnessed"].append({"instance": log.number, "turn": log.turn, "memory": memory_id, "who": who})


def _count_foreign_memories(
    state: dict[str, Any], log: InstanceLog, tally: dict[str, Any], witnesses: dict[str, Any], role_id: int
) -> None:
    """The long-term memories the turn retrieved (`state.retrieved`, kind memory) whose stored instance is another
    than the turn's: read from the scenario's database, the same in every mode (the director's layer of other
    instances' story events is a separate, labelled block, not counted here); and (issue 26) those the character
    did not witness."""
    ids = sorted(
        {int(item["id"]) for item in state.get("retrieved") or [] if item.get("kind") == "memory" and item.get("id")}
    )
    if not ids:
        return
    from personalab.nodes.rules.curation import character_identity

    rows = _memory_rows(ids)
    tally["memories"] += len(ids)
    for memory_id in ids:
        owner = rows[memory_id][0] if memory_id in rows else None
        if owner != log.instance_id:
            tally["foreign"].append(
                {"instance": log.number, "turn": log.turn, "memory": memory_id, "of_instance": owner}
            )
    _unwitnessed(ids, character_identity(role_id), log, witnesses, rows)


def _one_recall(turns: Turns, step: Step, log: InstanceLog, result: dict[str, Any], where: str) -> None:
    """Issue 26: a recall step — what an NPC (or the character) recalls, through the API or `memory recall --npc`;
    scored like a probe (kinds recall / recall_lacks) and counted for the unwitnessed goal. Not a turn."""
    try:
        found = turns.recall(log.instance_id, step.message, step.npc)
    except Exception as exc:
        raise TurnFailed(f"{where}: recall: {type(exc).__name__}: {exc}") from exc
    items = found.get("items") or []
    text = "\n".join(str(item.get("content", "")) for item in items)
    expect = step.recall
    checks: list[dict[str, Any]] = []
    if expect is not None:
        checks += [{"kind": "recall", "phrase": p, "ok": _contains(text, p)} for p in expect.retrieved]
        checks += [{"kind": "recall_lacks", "phrase": p, "ok": not _contains(text, p)} for p in expect.lacks]
    ids = sorted({int(item["id"]) for item in items if item.get("kind") == "memory" and item.get("id")})
    if ids:
        _unwitnessed(ids, str(found.get("witness")), log, result["witnesses"], _memory_rows(ids))
    result["probes"].append(
        {
            "instance": log.number,
            "turn": log.turn,
            "where": step.where,
            "probe": f"recall ({step.npc or 'the character'}): {step.message}",
            "checks": checks,
            "recall": {"witness": found.get("witness"), "items": len(items), "unwitnessed": found.get("unwitnessed")},
        }
    )


def _director_summary(logs: Sequence[InstanceLog], points: int, stall_turns: int) -> dict[str, Any]:
    """Outline adherence: points completed (per 10 turns), the director's fallbacks, and how many of them
    were followed by a progress marker within `stall_turns` turns (recovered)."""
    turns = sum(log.turn for log in logs)
    completed = sum(log.completed for log in logs)
    fallbacks = sum(len(log.fallback_turns) for log in logs)
    recovered = sum(
        1
        for log in logs
        for turn in log.fallback_turns
        if any(turn <= marker <= turn + stall_turns for marker in log.marker_turns)
    )
    return {
        "outline_points": points,
        "completed": completed,
        "completed_per_10_turns": round(10 * completed / turns, 3) if turns else 0.0,
        "fallbacks": fallbacks,
        "recovered": recovered,
        "turns": turns,
        "per_instance": [
            {"instance": log.number, "completed": log.completed, "fallbacks": len(log.fallback_turns)} for log in logs
        ],
    }
