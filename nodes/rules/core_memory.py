"""Core memory: the character's current persona as JSON (seed 002 需求2, Letta/MemGPT-style Core Memory).

Schema (every key required, no other key; strings may be empty unless noted non-blank):
- `name` (str, non-blank): the character's name; maintenance may not change it.
- `identity` (str): who the character is now, a sentence or two.
- `traits` (list[str], ≤ 8): personality traits.
- `binary_oppositions` (list, ≤ 3 — the seed's 二元对立 limit): `{"a": str, "b": str, "balance": float, "note": str}`;
  `balance` in [0, 1] is how far the character leans to `a` (0.5 = an even struggle); `a` ≠ `b`.
- `ternary_tensions` (list, ≤ 2 — the seed's 三元张力 limit): `{"poles": [3 distinct str], "weights": [3 floats in
  [0, 1] summing to 1 ± 0.05], "note": str}`.
- `values` (list[str], ≤ 6), `goals` (list[str], ≤ 5), `speech_style` (str).
- `recent_changes` (list, ≤ 5, oldest first): `{"turn": int ≥ 0, "change": str}` — the growth the seed asks for.
Limits: each string ≤ 200 characters, the whole JSON (compact, UTF-8 text) ≤ 2400 characters so that it fits in
the 4K head with the instruction and the outline.

Maintenance (seed 002 定期维护机制, every 10 turns): `maintenance_messages` builds the request (old core + last
10 turns + state-change events), `accept_core_memory` parses and validates the answer and keeps the old core
when the answer is unusable — a bad answer never replaces a good persona. Versions: a list of
`{"version", "turn", "reason", "core"}` in the checkpointed state, newest last (`CoreMemoryHistory`).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from personalab.nodes.rules import prompts
from personalab.nodes.rules.errors import InvalidInput, NotFound
from personalab.nodes.rules.reply import parse_reply, render_segments
from personalab.nodes.rules.request_catalog import RequestTexts, requests_for

MAX_BINARY = 3
MAX_TERNARY = 2
MAX_TRAITS = 8
MAX_VALUES = 6
MAX_GOALS = 5
MAX_CHANGES = 5
MAX_STRING = 200
MAX_CHARS = 2400
MAINTAIN_EVERY = 10
KEEP_VERSIONS = 20

FIELDS = (
    "name",
    "identity",
    "traits",
    "binary_oppositions",
    "ternary_tensions",
    "values",
    "goals",
    "speech_style",
    "recent_changes",
)
_LIST_LIMITS = {"traits": MAX_TRAITS, "values": MAX_VALUES, "goals": MAX_GOALS}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_string(problems: list[str], where: str, value: Any, *, blank_ok: bool = True) -> None:
    if not isinstance(value, str):
        problems.append(f"{where}: expected a string, got {type(value).__name__}")
    elif not blank_ok and not value.strip():
        problems.append(f"{where}: must not be empty")
    elif len(value) > MAX_STRING:
        problems.append(f"{where}: {len(value)} characters, over {MAX_STRING}")


def _check_keys(problems: list[str], where: str, item: Mapping[str, Any], keys: set[str]) -> bool:
    missing, extra = keys - set(item), set(item) - keys
    if missing:
        problems.append(f"{where}: missing {', '.join(sorted(missing))}")
    if extra:
        problems.append(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
    return not missing


def _object_items(
    problems: list[str], obj: Mapping[str, Any], key: str, limit: int, count_note: str, keys: set[str]
) -> list[tuple[str, Mapping[str, Any]]]:
    """The well-formed objects of the list `obj[key]` with where they are, after recording what is wrong with
    the list itself (not a list, over `limit`) and with each item (not an object, missing or unknown keys)."""
    if key not in obj:
        return []
    value = obj[key]
    if not isinstance(value, list):
        problems.append(f"{key}: expected a list, got {type(value).__name__}")
        return []
    if len(value) > limit:
        problems.append(f"{key}: {len(value)} {count_note.format(limit=limit)}")
    items = []
    for number, item in enumerate(value):
        where = f"{key}[{number}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: expected an object")
        elif _check_keys(problems, where, item, keys):
            items.append((where, item))
    return items


def validate_core_memory(obj: Any) -> list[str]:
    """Every way `obj` breaks the schema or the seed's complexity limits (module doc); [] when valid."""
    if not isinstance(obj, Mapping):
        return [f"core memory: expected a JSON object, got {type(obj).__name__}"]
    problems: list[str] = []
    missing = [key for key in FIELDS if key not in obj]
    if missing:
        problems.append(f"core memory: missing field(s) {', '.join(missing)}")
    extra = sorted(set(obj) - set(FIELDS))
    if extra:
        problems.append(f"core memory: unknown field(s) {', '.join(extra)}")

    if "name" in obj:
        _check_string(problems, "name", obj["name"], blank_ok=False)
    for key in ("identity", "speech_style"):
        if key in obj:
            _check_string(problems, key, obj[key])
    for key, limit in _LIST_LIMITS.items():
        value = obj.get(key)
        if key not in obj:
            continue
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {type(value).__name__}")
            continue
        if len(value) > limit:
            problems.append(f"{key}: {len(value)} items, at most {limit}")
        for number, item in enumerate(value):
            _check_string(problems, f"{key}[{number}]", item, blank_ok=False)

    binary = _object_items(
        problems,
        obj,
        "binary_oppositions",
        MAX_BINARY,
        "groups, at most {limit} (seed 002 需求2)",
        {"a", "b", "balance", "note"},
    )
    for where, item in binary:
        _check_string(problems, f"{where}.a", item["a"], blank_ok=False)
        _check_string(problems, f"{where}.b", item["b"], blank_ok=False)
        _check_string(problems, f"{where}.note", item["note"])
        if isinstance(item["a"], str) and item["a"].strip() == str(item["b"]).strip():
            problems.append(f"{where}: the two poles are the same")
        if not _is_number(item["balance"]) or not 0 <= item["balance"] <= 1:
            problems.append(f"{where}.balance: expected a number in [0, 1], got {item['balance']!r}")

    ternary = _object_items(
        problems,
        obj,
        "ternary_tensions",
        MAX_TERNARY,
        "groups, at most {limit} (seed 002 需求2)",
        {"poles", "weights", "note"},
    )
    for where, item in ternary:
        _check_string(problems, f"{where}.note", item["note"])
        poles, weights = item["poles"], item["weights"]
        if not isinstance(poles, list) or len(poles) != 3:
            problems.append(f"{where}.poles: expected a list of 3 poles")
        else:
            for pole_number, pole in enumerate(poles):
                _check_string(problems, f"{where}.poles[{pole_number}]", pole, blank_ok=False)
            if all(isinstance(p, str) for p in poles) and len({p.strip() for p in poles}) != 3:
                problems.append(f"{where}.poles: the three poles must differ")
        if not isinstance(weights, list) or len(weights) != 3 or not all(_is_number(w) for w in weights):
            problems.append(f"{where}.weights: expected a list of 3 numbers")
        elif not all(0 <= w <= 1 for w in weights) or abs(sum(weights) - 1) > 0.05:
            problems.append(f"{where}.weights: each in [0, 1] and summing to 1, got {weights!r}")

    changes = _object_items(problems, obj, "recent_changes", MAX_CHANGES, "items, at most {limit}", {"turn", "change"})
    for where, item in changes:
        turn = item["turn"]
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
            problems.append(f"{where}.turn: expected a non-negative integer, got {turn!r}")
        _check_string(problems, f"{where}.change", item["change"], blank_ok=False)

    size = len(compact_json(obj))
    if size > MAX_CHARS:
        problems.append(f"core memory: {size} characters of JSON, over {MAX_CHARS}")
    return problems


def compact_json(obj: Any) -> str:
    """The JSON text the size limit is measured on."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


def initial_core_memory(role_name: str, persona_text: str) -> dict[str, Any]:
    """The core memory of a new instance from the role's name and initial persona (seed 002 会话实例 创建).

    No LLM: the persona text becomes the identity (cut to the string limit) and the rest starts empty; the first
    maintenance run (turn 10) fills traits, oppositions, tensions... from the text and the dialogue.
    """
    if not isinstance(role_name, str) or not role_name.strip():
        raise InvalidInput("initial_core_memory: role_name is empty")
    identity = " ".join((persona_text or "").split())
    if len(identity) > MAX_STRING:
        identity = identity[: MAX_STRING - 1] + "…"
    return {
        "name": role_name.strip(),
        "identity": identity,
        "traits": [],
        "binary_oppositions": [],
        "ternary_tensions": [],
        "values": [],
        "goals": [],
        "speech_style": "",
        "recent_changes": [],
    }


def should_maintain(turn: int, every: int = MAINTAIN_EVERY) -> bool:
    """Maintenance runs after every `every`-th turn (seed 002: 每10轮触发)."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise InvalidInput(f"should_maintain: every must be a positive integer, got {every!r}")
    return isinstance(turn, int) and turn > 0 and turn % every == 0


def _dialogue_line(message: Mapping[str, str], texts: RequestTexts) -> str:
    role = message.get("role")
    content = message.get("content", "")
    if role == "assistant":
        content = render_segments(parse_reply(content), tts=False)
        return f"{texts.speaker_character}{texts.colon}{content}"
    if role == "user":
        return f"{texts.speaker_user}{texts.colon}{content}"
    return texts.aside.format(content=content)


def maintenance_messages(
    old_core: Mapping[str, Any],
    last_turns: Sequence[Mapping[str, str]],
    state_events: Sequence[Any],
    *,
    turn: int = 0,
    language: str | None = None,
) -> list[dict[str, str]]:
    """The maintenance request (seed 002: 旧Core Memory + 最近10轮对话 + 状态变化事件 → 完整的Core Memory).

    `last_turns`: the messages of the last turns (role/content; tts text left out); `state_events`: strings or
    dicts with `text`; `turn`: the current turn, for the `recent_changes` entries the model writes;
    `language`: the instance's (issue 28; None: Chinese).
    """
    texts = requests_for(language)
    if not isinstance(old_core, Mapping):
        raise InvalidInput("maintenance_messages: old_core must be a dict")
    events = []
    for number, event in enumerate(state_events):
        text = event if isinstance(event, str) else event.get("text") if isinstance(event, Mapping) else None
        if not isinstance(text, str):
            raise InvalidInput(f"maintenance_messages: state event {number} is neither a string nor a dict with 'text'")
        events.append(f"- {' '.join(text.split())}")
    dialogue = [_dialogue_line(m, texts) for m in last_turns if m.get("content")]
    turn_count = sum(1 for m in last_turns if m.get("role") == "user")
    system = texts.core_memory_system.format(
        marker=texts.marker(prompts.PURPOSE_CORE_MEMORY),
        max_traits=MAX_TRAITS,
        max_binary=MAX_BINARY,
        max_ternary=MAX_TERNARY,
        max_values=MAX_VALUES,
        max_goals=MAX_GOALS,
        max_changes=MAX_CHANGES,
        max_chars=MAX_CHARS,
    )
    user = texts.core_memory_user.format(
        old_core=json.dumps(dict(old_core), ensure_ascii=False, indent=1),
        turn_count=turn_count,
        dialogue="\n".join(dialogue) or texts.core_memory_no_dialogue,
        events="\n".join(events) or texts.core_memory_no_events,
        turn=turn,
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def parse_core_memory(answer: str) -> dict[str, Any]:
    """The JSON object in a model's answer: inside a ```json fence if there is one, else from the first `{` to
    the last `}`. ValueError when there is no JSON object or it does not parse. Does not validate the schema."""
    text = answer or ""
    fenced = _FENCE_RE.search(text)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise InvalidInput(f"core memory answer has no JSON object: {' '.join((answer or '').split())[:80]!r}")
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"core memory answer is malformed JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidInput("core memory answer is not a JSON object")
    return value


def accept_core_memory(old_core: Mapping[str, Any], answer: str) -> tuple[dict[str, Any], list[str]]:
    """(core to keep, problems): the parsed answer when it is valid and keeps the name, else the old core."""
    try:
        new = parse_core_memory(answer)
    except ValueError as exc:
        return copy.deepcopy(dict(old_core)), [str(exc)]
    problems = validate_core_memory(new)
    if not problems and new.get("name") != old_core.get("name"):
        problems.append(f"name: changed from {old_core.get('name')!r} to {new.get('name')!r}")
    if problems:
        return copy.deepcopy(dict(old_core)), problems
    return new, []


@dataclass(frozen=True)
class CoreMemoryHistory:
    """Versions of the core memory, newest last, as the plain list kept in the checkpointed state.

    Every method returns a new history; `to_state()` is what to store. Version numbers only grow (a rollback
    adds a version), so a version number always names the same persona.
    """

    versions: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_state(cls, versions: Sequence[Mapping[str, Any]] | None) -> CoreMemoryHistory:
        items = []
        for number, item in enumerate(versions or []):
            if not isinstance(item, Mapping) or not {"version", "turn", "reason", "core"} <= set(item):
                raise InvalidInput(f"core memory history item {number}: expected version, turn, reason and core")
            items.append(copy.deepcopy(dict(item)))
        return cls(tuple(items))

    def to_state(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(item) for item in self.versions]

    @property
    def current(self) -> dict[str, Any] | None:
        """The newest core memory, or None when there is none."""
        return copy.deepcopy(self.versions[-1]["core"]) if self.versions else None

    def push(self, core: Mapping[str, Any], *, turn: int, reason: str, keep: int = KEEP_VERSIONS) -> CoreMemoryHistory:
        """Add `core` as the newest version (the oldest beyond `keep` are forgotten). Invalid core → ValueError."""
        problems = validate_core_memory(core)
        if problems:
            raise InvalidInput("core memory is invalid: " + "; ".join(problems))
        if keep < 1:
            raise InvalidInput(f"CoreMemoryHistory.push: keep must be >= 1, got {keep}")
        number = self.versions[-1]["version"] + 1 if self.versions else 1
        item = {"version": number, "turn": turn, "reason": reason, "core": copy.deepcopy(dict(core))}
        return CoreMemoryHistory((*self.versions, item)[-keep:])

    def rollback(self, to_version: int | None = None, *, turn: int = 0) -> CoreMemoryHistory:
        """Make `to_version` (default: the one before the newest) current again, as a new version whose reason
        names it: the history stays append-only, so a rollback can itself be undone. LookupError when that
        version is not kept, or when there is nothing to go back to."""
        if to_version is None:
            if len(self.versions) < 2:
                raise NotFound("core memory history: no earlier version to roll back to")
            target = self.versions[-2]
        else:
            found = [item for item in self.versions if item["version"] == to_version]
            if not found:
                kept = ", ".join(str(item["version"]) for item in self.versions) or "none"
                raise NotFound(f"core memory history: version {to_version} is not kept (kept: {kept})")
            target = found[0]
        return self.push(target["core"], turn=turn, reason=f"rollback to version {target['version']}")


LAST_TURNS = 10


def last_turn_messages(messages: list[dict[str, str]], turns: int = LAST_TURNS) -> list[dict[str, str]]:
    """The messages of the last `turns` turns (a turn starts at a user message)."""
    starts = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return list(messages[starts[-turns] if len(starts) >= turns else 0 :])
