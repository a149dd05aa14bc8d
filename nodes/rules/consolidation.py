"""Consolidation of facts (issue 26; seed 004 记忆演化 / 记忆冲突检测和解决), as pure rules.

A fact the user tells about themselves ("我住在北京", "I moved to Shanghai") is compared with the facts stored
about the same thing (its `slot`: where the user lives, their job, name, age, pet…) and becomes one of mem0's
decisions:
- ``add``: nothing stored about it yet — a new fact memory (type ``semantic``, tagged ``fact``);
- ``update``: a different value — a new fact memory; the old one is kept, closed at this turn (Zep/Graphiti's
  validity interval: `valid_to_turn`, `superseded_by`), so "where did I live before?" can still be answered;
- ``merge``: the same value said with more detail ("上海" then "上海浦东") — the stored fact takes the fuller text;
- ``none``: the same value again — nothing is written (a repeat is not a new memory).
Offline (the scripted model) the decision is these rules' (`decided_by: rules`); a real model may decide instead
in the background (`stores.consolidation`), one call per turn at most. Every step is recorded and can be undone.

Past questions (`asks_about_past`: 以前 / 之前 / 原来 / used to / before …) are answered from the closed facts too;
otherwise retrieval presents the current truth and leaves closed facts out (`presentable`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

FACT_TAG = "fact"
FACT_TYPE = "semantic"  # seed 004 语义记忆


class Action(StrEnum):
    ADD = "add"
    UPDATE = "update"
    MERGE = "merge"
    NONE = "none"


@dataclass(frozen=True)
class Fact:
    """One fact of a message: what it is about (`slot`), its value, and the sentence that said it."""

    slot: str
    value: str
    text: str


_END = r"(?=[，。！？、,.!?；;\s]|$)"
_VALUE = r"([^\s，。！？、,.!?；;了啦呢吧啊]{1,16}?)"
# (slot, pattern): the first group is the value. Ordered: a more specific pattern first.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "住处",
        re.compile(
            r"我(?:现在|已经|最近)?(?:搬到了|搬到|搬去了|搬去|搬家到|搬回了|搬回)"
            + _VALUE
            + r"(?:住|居住|生活|去)?(?:了)?"
            + _END
        ),
    ),
    ("住处", re.compile(r"我(?:现在|目前|一直)?(?:住在|住|生活在|定居在)" + _VALUE + r"(?:了)?" + _END)),
    (
        "工作",
        re.compile(
            r"我(?:现在|目前)?(?:在" + _VALUE + r"(?:上班|工作)|的工作是" + r"([^\s，。！？,.!?]{1,16}?)" + _END + r")"
        ),
    ),
    ("职业", re.compile(r"我(?:现在|目前)?(?:是一名|是一个|是个|是名|当了|成了)" + _VALUE + r"(?:了)?" + _END)),
    ("名字", re.compile(r"我(?:的名字)?叫" + _VALUE + _END)),
    ("年龄", re.compile(r"(?:我|我今年|今年我|我现在|我已经|今年)(\d{1,3}|[一二三四五六七八九十]{1,3})岁")),
    ("宠物", re.compile(r"我(?:家)?的?(?:猫|狗|宠物)(?:的名字)?叫" + _VALUE + _END)),
    (
        "residence",
        re.compile(r"\bI (?:now |currently )?(?:live|lived) in ([A-Z][\w .'-]{1,30}?)" + r"(?=[,.!?;]|$| now| these)"),
    ),
    (
        "residence",
        re.compile(r"\bI(?:'ve| have)? (?:just )?moved to ([A-Z][\w .'-]{1,30}?)" + r"(?=[,.!?;]|$| last| this| now)"),
    ),
    ("job", re.compile(r"\bI (?:now )?work (?:as an?|at) ([\w .'-]{1,30}?)(?=[,.!?;]|$)")),
    ("name", re.compile(r"\bmy name is ([A-Z][\w'-]{0,20})", re.IGNORECASE)),
)

# someone the user talks about: "我妹妹叫林小禾，今年十二岁" tells the sister's age, not the user's
_OTHERS = re.compile(
    r"(妹妹|弟弟|哥哥|姐姐|妈妈|爸爸|母亲|父亲|爷爷|奶奶|朋友|同事|儿子|女儿|孩子|老婆|老公|丈夫|妻子|男朋友|女朋友|[她他它])"
)

_PAST_WORDS = ("以前", "之前", "原来", "过去", "曾经", "从前", "上次", "当初", "原先")
_PAST_EN = re.compile(r"\b(used to|before|previously|formerly|earlier|in the past)\b", re.IGNORECASE)


def extract_facts(message: str) -> list[Fact]:
    """The facts `message` tells about its speaker, one per slot (the last said wins: "我住北京，不对，住上海")."""
    found: dict[str, Fact] = {}
    for sentence in re.split(r"(?<=[。！？!?；;\n])", message):
        if _is_question(sentence):  # "我现在住在哪个城市？" asks; it tells no fact
            continue
        for slot, pattern in _PATTERNS:
            for match in pattern.finditer(sentence):
                value = next((g for g in match.groups() if g), "").strip()
                if value and not _about_someone_else(sentence, match):
                    found[slot] = Fact(slot, value, sentence.strip())
    return list(found.values())


def _about_someone_else(sentence: str, match: re.Match[str]) -> bool:
    """A match that does not start at "我" (the age's bare "今年…岁") in a sentence that named someone else before it:
    the sentence's subject carries over, so the fact is that person's ("我妹妹叫林小禾，今年十二岁")."""
    return not match.group(0).startswith("我") and bool(_OTHERS.search(sentence[: match.start()]))


_QUESTION_WORDS = ("哪", "什么", "谁", "多少", "几岁", "吗")
_QUESTION_EN = re.compile(r"^\s*(where|what|which|who|how|do|does|did|am|are|is)\b", re.IGNORECASE)


def _is_question(sentence: str) -> bool:
    """A sentence that asks rather than tells: it ends in a question mark or holds a question word."""
    text = sentence.strip()
    if text.endswith(("？", "?")):
        return True
    return any(word in text for word in _QUESTION_WORDS) or bool(_QUESTION_EN.search(text))


def asks_about_past(query: str) -> bool:
    """A question about what was true before (以前 / 之前 / 原来 / used to / before …)."""
    return any(word in query for word in _PAST_WORDS) or bool(_PAST_EN.search(query))


def fact_content(fact: Fact, user_name: str) -> str:
    """A fact memory's text: ``【住处】莱姆：我搬到上海了`` — the slot, who said it, what they said."""
    return f"【{fact.slot}】{user_name}：{fact.text}"


def slot_of(content: str) -> str | None:
    """The slot of a stored fact memory (its ``【slot】`` prefix)."""
    match = re.match(r"【([^】]{1,12})】", content)
    return match.group(1) if match else None


def _norm(value: str) -> str:
    return re.sub(r"\s+", "", value).lower()


@dataclass(frozen=True)
class Decision:
    """What one new fact does: `action`, the stored fact it acts on (`target_id`), why."""

    action: Action
    fact: Fact
    target_id: int | None = None
    reason: str = ""
    decided_by: str = "rules"


def decide(fact: Fact, stored: Sequence[Mapping[str, Any]]) -> Decision:
    """The rules' decision for `fact` given the stored current facts (`{"id", "content", "value"}`, newest first)
    of the same slot: none / merge / update / add (module docstring)."""
    current = next(iter(stored), None)
    if current is None:
        return Decision(Action.ADD, fact, None, f"nothing stored about {fact.slot}")
    old, new = _norm(str(current.get("value") or "")), _norm(fact.value)
    if old == new:
        return Decision(Action.NONE, fact, int(current["id"]), f"{fact.slot} is already {fact.value}")
    if old and new and (old in new or new in old):
        fuller = "the new" if len(new) > len(old) else "the stored"
        return Decision(Action.MERGE, fact, int(current["id"]), f"same {fact.slot}, {fuller} text is fuller")
    return Decision(
        Action.UPDATE, fact, int(current["id"]), f"{fact.slot} changed from {current.get('value')} to {fact.value}"
    )


def value_of(content: str) -> str:
    """The value a stored fact memory holds: re-extracted from its sentence."""
    slot = slot_of(content)
    text = content.split("：", 1)[1] if "：" in content else content
    for fact in extract_facts(text):
        if fact.slot == slot:
            return fact.value
    return ""


def presentable(item: Mapping[str, Any], *, past: bool) -> bool:
    """Whether a retrieved memory is shown: a closed fact (no longer true) only for a question about the past."""
    return item.get("valid_to_turn") is None or past


def past_note(valid_to_turn: int) -> str:
    """How a closed fact is marked when shown: it was true until that turn, and is not any more."""
    return f"（已过时：第{valid_to_turn}轮起不再如此）"
