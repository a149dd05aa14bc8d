"""What fed a reply (issue 23), and the seed 004 kind of a memory: pure functions over a turn's state.

`reply_provenance` turns what a turn already has when its reply is stored (the retrieved memories with their score
breakdowns, the fired world-book entries and selected knowledge entries with their reasons, the injection plan of the
retrieved region, the prompt's region budgets, the core-memory version, the rewritten query) into one JSON-ready
record, stored with the reply (`nodes.write_back`). Each memory, world-book and knowledge entry says whether it
reached the prompt (`in_prompt`) or why it was cut (`cut`); `cut` lists everything a budget dropped.

`memory_kind` places seed 001's memory types among seed 004's four kinds (情景 / 语义 / 特质 / 目标记忆), which the
store does not keep apart: what happened (conversation, action, observation, event, emotion, a dialogue-record line)
is episodic; what is known (relationship, internal context) is semantic; trait and goal are themselves; a persona change (seed 002 archival memory) is a trait memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PROVENANCE_VERSION = 1
KINDS: tuple[str, ...] = ("episodic", "semantic", "trait", "goal")
KIND_OF_TYPE: Mapping[str, str] = {
    "conversation": "episodic",
    "action": "episodic",
    "observation": "episodic",
    "event": "episodic",
    "emotion": "episodic",
    "episodic": "episodic",
    "record": "episodic",
    "relationship": "semantic",
    "internal": "semantic",
    "semantic": "semantic",
    "trait": "trait",
    "goal": "goal",
    "persona_change": "trait",  # seed 002 历史人格变化事件: how the character's traits changed
}


def memory_kind(memory_type: str) -> str:
    """Seed 004's kind of a memory of type `memory_type` (module docstring); episodic for an unknown type."""
    return KIND_OF_TYPE.get(str(memory_type), "episodic")


def types_of_kind(kind: str) -> list[str]:
    """The memory types of seed 004's kind `kind` (`InvalidInput`-free: the caller checks `kind` in `KINDS`)."""
    return [memory_type for memory_type, of in KIND_OF_TYPE.items() if of == kind]


def _status(rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Injection-plan rows (`InjectionPlan.debug`) by key, an included row over a skipped one."""
    out: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        key = str(row.get("key"))
        if key not in out or row.get("status") == "included":
            out[key] = row
    return out


def _placed(item: dict[str, Any], row: Mapping[str, Any] | None) -> dict[str, Any]:
    if row is None:
        return {**item, "in_prompt": False, "cut": "not offered to the prompt"}
    if row.get("status") == "included":
        return {**item, "in_prompt": True}
    return {**item, "in_prompt": False, "cut": str(row.get("reason") or "skipped")}


def _rounded(value: Any) -> Any:
    """Scores to 4 decimals: the record stays small (one insert per reply) and says as much."""
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, Mapping):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def _memory(item: Mapping[str, Any]) -> dict[str, Any]:
    # `weighted` (each factor times its scene weight) follows from the factors and the scene: not stored
    breakdown = {key: _rounded(value) for key, value in (item.get("breakdown") or {}).items() if key != "weighted"}
    return {
        "id": item.get("id"),
        "content": item.get("content") or "",
        "score": _rounded(item.get("score")),
        "layer": item.get("layer"),
        "type": item.get("type"),
        "kind": memory_kind(str(item.get("type") or "")),
        "turn": item.get("turn"),
        "line_id": item.get("line_id"),
        # the user's hand on it when the reply was made (issue 25 "why this reply": pin)
        "pinned": bool(item.get("pinned")),
        "user_edited": bool(item.get("user_edited")),
        # the retrieval paths that found it (bm25, vector, tag, worldbook, …) with its rank on each: why it fired
        "trigger": sorted(breakdown.get("paths") or {}),
        "breakdown": breakdown,
    }


def reply_provenance(state: Mapping[str, Any]) -> dict[str, Any]:
    """The record of what fed the reply of the turn `state` (a `TurnState` as `write_back` has it)."""
    debug = state.get("debug") or {}
    retrieval = debug.get("retrieval") or {}
    prompt = debug.get("prompt") or {}
    plan = _status(retrieval.get("injection") or [])
    memories = [
        _placed(_memory(item), plan.get(f"memory:{item.get('id')}"))
        for item in state.get("retrieved") or []
        if item.get("kind") == "memory"
    ]
    worldbook = [
        _placed(dict(entry), plan.get(f"worldbook:{entry.get('id')}"))
        for entry in retrieval.get("worldbook_fired") or []
    ]
    knowledge = [
        _placed(dict(entry), plan.get(f"knowledge:{entry.get('id')}")) for entry in retrieval.get("knowledge") or []
    ]
    cut: list[dict[str, Any]] = [
        {"region": "retrieved", "key": row.get("key"), "tokens": row.get("tokens"), "reason": row.get("reason")}
        for row in retrieval.get("injection") or []
        if row.get("status") == "skipped"
    ]
    for region in ("head", "middle", "retrieved", "tail"):
        for dropped in (prompt.get(region) or {}).get("dropped") or []:
            cut.append({"region": region, **(dropped if isinstance(dropped, Mapping) else {"what": str(dropped)})})
    for dropped in (prompt.get("window") or {}).get("cut") or []:  # what the context window itself cut
        cut.append({"region": "window", **(dropped if isinstance(dropped, Mapping) else {"what": str(dropped)})})
    versions = state.get("core_memory_versions") or []
    core = versions[-1] if versions else None
    history = state.get("history") or []
    middle = prompt.get("middle") or {}
    rewrite = debug.get("query_rewrite") or {}
    return {
        "version": PROVENANCE_VERSION,
        "turn": state.get("turn"),
        "message": state.get("message") or "",
        "query": state.get("query") or state.get("message") or "",
        "query_rewrite": rewrite.get("status") if isinstance(rewrite, Mapping) else None,
        "scene": retrieval.get("scene"),
        "model": state.get("model") or "",
        "memories": memories,
        "worldbook": worldbook,
        "knowledge": knowledge,
        "dropped": list(retrieval.get("dropped") or []),  # retrieval's own drops (near-duplicates, low relevance)
        "in_recent_dialogue": list(retrieval.get("in_recent_dialogue") or []),
        "core_memory": (
            {"version": core.get("version"), "turn": core.get("turn"), "reason": core.get("reason")} if core else None
        ),
        "recall_window": {
            "lines": len(history),
            "first_line_id": history[0].get("id") if history else None,
            "last_line_id": history[-1].get("id") if history else None,
            "turns_kept": middle.get("turns_kept"),
            "turns_total": middle.get("turns_total"),
        },
        "regions": {
            region: {key: (prompt.get(region) or {}).get(key) for key in ("tokens", "budget", "over_budget")}
            for region in ("head", "middle", "retrieved", "tail")
            if region in prompt
        },
        "cut": cut,
    }


def usage_counts(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How often memories of each layer, type, kind and trigger path were retrieved for a reply and put into its
    prompt (`used`), over stored provenance records; and per memory id the same two counts."""
    counts: dict[str, dict[str, dict[str, int]]] = {name: {} for name in ("layer", "type", "kind", "trigger")}
    per_memory: dict[str, dict[str, int]] = {}
    worldbook: dict[str, dict[str, int]] = {}
    replies = 0
    for record in records:
        replies += 1
        for item in record.get("memories") or []:
            used = bool(item.get("in_prompt"))
            keys = {
                "layer": [item.get("layer")],
                "type": [item.get("type")],
                "kind": [item.get("kind")],
                "trigger": list(item.get("trigger") or []),
            }
            for name, values in keys.items():
                for value in values:
                    bucket = counts[name].setdefault(str(value), {"retrieved": 0, "used": 0})
                    bucket["retrieved"] += 1
                    bucket["used"] += used
            mine = per_memory.setdefault(str(item.get("id")), {"retrieved": 0, "used": 0})
            mine["retrieved"] += 1
            mine["used"] += used
        for entry in record.get("worldbook") or []:
            bucket = worldbook.setdefault(str(entry.get("trigger")), {"retrieved": 0, "used": 0})
            bucket["retrieved"] += 1
            bucket["used"] += bool(entry.get("in_prompt"))
    return {"replies": replies, **counts, "worldbook_trigger": worldbook, "per_memory": per_memory}
