"""Relations between the instance's character and the scene's other participants (issue 26: "relations between
characters and NPCs are tracked like the user's"), as pure rules.

Who (seed 000's lines): a participant is the speaker of a host line who is neither the user, the instance's
character, the narration nor a system line —
- another character: ``role:<role_id>``;
- a script NPC: ``npc:<script_role_id>`` (the witness identities of `rules.curation`);
- a named NPC without either id: ``name:<display_name>`` (旁白 / Narrator and the like are narration).

What (seed 003 关系变化判断, the rows that apply to a participant): the same three values, start and ranges as the
user's relationship (`effects.apply_relationship`), moved by what the participant said or did in the turn (its
lines' content and action, matched like the user's message: `rules.match_keywords` on the review's keyword lists)
— a trust keyword trust +1, an affection keyword affection +1, a negative keyword affection -1 — and familiarity +1
for each turn the participant appears in. Not applied: the choice rows (the choice is the user's) and the real-time
gap row (the gap is the user's absence, not the scene's). A participant's relation is created in the review of the
turn it first speaks in. In LLM review mode the model is shown each participant's words and deeds
(`turn_context.participants`) and may answer a delta for each (`ReviewOutput.participant_deltas`); a participant it
leaves out, and every participant in rule mode or when the model's answer falls back, is scored by the rule table.

Kept as the story field ``relations``: identity → {name, trust, affection, familiarity, first_turn, last_turn}.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.review.effects import RELATIONSHIP_KEYS, apply_relationship
from personalab.nodes.rules.review.rules import match_keywords
from personalab.nodes.rules.review.types import DEFAULT_CONFIG, RelationshipDelta, ReviewConfig

# display names of narration (seed 000's example calls it 旁白); such a line has no participant
NARRATION_NAMES = frozenset({"旁白", "narrator", "narration", "系统", "system"})
PROMPT_RELATIONS_MAX = 6  # at most this many of the scene's participants in the prompt's tail (newest speakers)


def participant_of(
    line: Mapping[str, Any], character_role_id: int | None, character_name: str = ""
) -> tuple[str, str] | None:
    """(identity, name) of a line's speaker when it is another participant of the scene (module doc); None for
    the user, a system line, the narration and the instance's character itself."""
    if line.get("attribute") != "assistant":
        return None
    name = str(line.get("display_name") or "").strip()
    role_id = line.get("role_id")
    if role_id is not None:
        if character_role_id is not None and int(role_id) == int(character_role_id):
            return None
        return f"role:{int(role_id)}", name or f"role:{int(role_id)}"
    script_role_id = str(line.get("script_role_id") or "").strip()
    if script_role_id:
        return f"npc:{script_role_id}", name or script_role_id
    if not name or name.casefold() in NARRATION_NAMES or name == character_name.strip():
        return None
    return f"name:{name}", name


def turn_participants(
    lines: Iterable[Mapping[str, Any]], character_role_id: int | None, character_name: str = ""
) -> dict[str, dict[str, str]]:
    """The participants speaking in `lines`, in order of first appearance: identity → {"name", "text"} (the text
    is everything they said and did, content and action, one line each)."""
    found: dict[str, dict[str, str]] = {}
    for line in lines:
        who = participant_of(line, character_role_id, character_name)
        if who is None:
            continue
        identity, name = who
        said = " ".join(str(line.get(key) or "").strip() for key in ("content", "action_content")).strip()
        entry = found.setdefault(identity, {"name": name, "text": ""})
        entry["text"] = (entry["text"] + "\n" + said).strip()
    return found


def score_participant(text: str, config: ReviewConfig | None = None) -> tuple[RelationshipDelta, str]:
    """The change of the character's relation to a participant for what it said / did this turn (seed 003
    关系变化判断's keyword rows and the familiarity per turn; module doc), and the reason."""
    config = config or DEFAULT_CONFIG
    trust = affection = 0
    parts: list[str] = []
    for kind, keywords in (
        ("trust", config.trust_keywords),
        ("affection", config.affection_keywords),
        ("negative", config.negative_keywords),
    ):
        matched = match_keywords(text, keywords)
        if not matched:
            continue
        if kind == "trust":
            trust += 1
        else:
            affection += 1 if kind == "affection" else -1
        change = "trust +1" if kind == "trust" else ("affection +1" if kind == "affection" else "affection -1")
        parts.append(f"{change} ({kind} keyword {'、'.join(matched)})")
    familiarity = config.familiarity_per_turn
    parts.append(f"familiarity {familiarity:+d} (appeared this turn)")
    return RelationshipDelta(trust, affection, familiarity), "; ".join(parts)


def apply_relations(
    current: Mapping[str, Any] | None,
    participants: Mapping[str, Mapping[str, str]],
    turn: int,
    config: ReviewConfig | None = None,
    decided: Mapping[str, RelationshipDelta] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the relations after one reviewed turn, this turn's changes: identity → {"name", "delta", "reason",
    "source"}). A participant seen for the first time gets a relation from the start values; one not speaking this
    turn keeps its relation unchanged. `decided`: the LLM review's deltas (`ReviewOutput.participant_deltas`),
    used for the participants it names; the others, and any it names that did not speak, are left to the rule
    table. `current` is not changed."""
    relations: dict[str, dict[str, Any]] = {key: dict(value) for key, value in (current or {}).items()}
    changes: dict[str, dict[str, Any]] = {}
    for identity, seen in participants.items():
        if decided and identity in decided:
            delta, reason, source = decided[identity], "the model's review", "llm"
        else:
            (delta, reason), source = score_participant(seen.get("text", ""), config), "rule"
        before = relations.get(identity)
        values = apply_relationship({k: before[k] for k in RELATIONSHIP_KEYS} if before else None, delta)
        relations[identity] = {
            "name": seen.get("name") or identity,
            **values,
            "first_turn": before.get("first_turn", turn) if before else turn,
            "last_turn": turn,
        }
        changes[identity] = {
            "name": relations[identity]["name"],
            "delta": delta.to_dict(),
            "reason": reason,
            "source": source,
        }
    return relations, changes


def host_lines_of_turn(
    history: Sequence[Mapping[str, Any]], host_lines: int, regenerated: bool, character_role_id: int | None
) -> list[Mapping[str, Any]]:
    """The host's lines of the turn whose user line ends `history`: the `host_lines` lines before it; for a
    regenerated reply (its host lines were stored with the first one), the lines back to the previous user line
    or the character's own line."""
    if not history:
        return []
    before = list(history[:-1])
    if not regenerated:
        return before[len(before) - host_lines :] if host_lines else []
    found: list[Mapping[str, Any]] = []
    for line in reversed(before):
        if line.get("attribute") == "user":
            break
        role_id = line.get("role_id")
        own = line.get("attribute") == "assistant" and (
            (role_id is not None and character_role_id is not None and int(role_id) == int(character_role_id))
            or (role_id is None and not line.get("script_role_id") and not line.get("display_name"))
        )
        if own:
            break
        found.append(line)
    return list(reversed(found))


def scene_relations(
    relations: Mapping[str, Any] | None,
    scene: Sequence[Mapping[str, Any]],
    character_role_id: int | None,
    character_name: str = "",
    limit: int = PROMPT_RELATIONS_MAX,
) -> dict[str, dict[str, int]]:
    """What the prompt shows (issue 26): the character's relation to each participant speaking in `scene` (the
    recent lines) that has one, newest speaker first, at most `limit`: "name (identity)" → the three values. A
    participant not in the recent scene is not shown."""
    if not relations:
        return {}
    shown: dict[str, dict[str, int]] = {}
    for line in reversed(scene):
        who = participant_of(line, character_role_id, character_name)
        if who is None or who[0] not in relations:
            continue
        identity = who[0]
        record = relations[identity]
        label = f"{record.get('name') or identity} ({identity})"
        if label in shown:
            continue
        shown[label] = {key: int(record.get(key, 0)) for key in RELATIONSHIP_KEYS}
        if len(shown) >= limit:
            break
    return shown


def relation_identity(relations: Mapping[str, Any] | None, npc: str, instance_id: int) -> str:
    """The identity of the participant `npc` names: an identity (``npc:laochen``, ``role:3``, ``name:守卫``), a
    script NPC's script_role_id or a participant's name. `InvalidInput` naming it when the current branch has no
    relation with it (it never spoke in the scene)."""
    if not isinstance(npc, str) or not npc.strip():
        raise InvalidInput(f"npc must be a participant's id or name, got {npc!r}")
    wanted = npc.strip()
    known = relations or {}
    for identity in (wanted, f"npc:{wanted}", f"name:{wanted}"):
        if identity in known:
            return identity
    by_name = [identity for identity, record in known.items() if str(record.get("name") or "") == wanted]
    if len(by_name) == 1:
        return by_name[0]
    raise InvalidInput(
        f"npc {wanted!r} is not in the scene of instance {instance_id} (no relation with it on the current branch)"
    )
