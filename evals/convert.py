"""`personalab eval convert locomo|memorybank PATH [--out DIR]`: public dialogue data as scenario files (issue 12).

The data is read by path and never shipped; what is written is a scenario per conversation (LoCoMo) or per user
(MemoryBank), each validated like any scenario file before it is written.

- **LoCoMo** (`locomo10.json` layout; evals/locomo.py reads it): speaker A is the user, speaker B the character.
  Each of A's turns is a user turn; B's lines since A's last turn come before it as host lines (so the dialogue
  tree holds the conversation as it was); a session starts with `session: new` (gap days). Questions of categories
  1–4 with evidence become probes after the last session: the answer when the evidence turn holds it word for word,
  else the first words of the evidence turn, must be in the retrieved region.
- **MemoryBank cn** (`memory_bank_cn.json` + `probing_questions_cn.jsonl` in one folder; 15 users × 10 days of
  Chinese companion chat): each user's queries are user turns, each day a session (gap from the dates). The probing
  questions have no answers: the ones labelled here (`MEMORYBANK_LABELS`, by hand, from the user's own words) are
  probes, the others are played as driver turns, unscored.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs installed (types-PyYAML is not a dependency)
from personalab.evals.locomo import CATEGORIES, load_locomo
from personalab.evals.scenario import parse_document
from personalab.nodes.rules.errors import InvalidInput

# Hand labels of MemoryBank cn probing questions (user → question → phrases the user said earlier that answer it).
MEMORYBANK_LABELS: dict[str, dict[str, list[str]]] = {
    "张曼婷": {
        "我曾经和你推荐过一部科幻电影，它的名字是？": ["流浪地球"],
        "我曾经在图书馆学习时看过一本小说，它的名字是？": ["百年孤独"],
        "我曾经和你提到我去过绿禾公园，我在绿禾公园看到了什么景色？": ["樱花"],
        "我曾经和你分享过一部文艺片《出租车司机》，它的内容是？": ["迥异的客人"],
    },
    "王峰": {
        "在4月27号这天，我在公园里跑了多久？": ["一个小时"],
        "我喜欢听什么类型的音乐？": ["爵士乐"],
        "在5月6号我读了一本书，它的名字是？": ["活着"],
        "我4月30号为什么要问你舒缓压力和放松心情的办法？": ["工作压力"],
    },
    "李雪": {"我喜欢哪些菜系？": ["川菜"]},
    "孙悦": {
        "最近我在尝试哪些健身的方法？": ["HIIT"],
        "我去云台山摄影的时候遇到了什么麻烦，谁帮助了我？": ["陌生的女孩子"],
    },
    "周立": {
        "我最近计划去哪个国家玩？": ["新西兰"],
        "我喜欢哪些菜系？": ["日本料理"],
        "我去参观博物馆，最感兴趣的展品是？": ["古代绘画"],
        "我喜欢在什么地方拍摄？": ["海滩"],
    },
    "刘琳": {"在5月2号我买了一件连衣裙，它的颜色是？": ["白色连衣裙"]},
    "张志强": {
        "4月30号我做了一道什么菜？": ["回锅肉"],
        "5月5号我做了一道什么菜？": ["番茄炒蛋"],
        "我曾看过一部爱情电影，它的名字是？": ["泰坦尼克号"],
        "我和你分享过一本关于控制情绪的心理书，它的名字是？": ["Emotional Intelligence"],
    },
    "宫晓燕": {
        "我曾和你分享过一部电影：《当幸福来敲门》，它讲了什么？": ["失业家庭父亲"],
        "在5月2号，我的心情是怎么样的？": ["压抑和焦虑"],
        "我曾经和你分享过做糖醋鱼的经历，还记得具体的做法是什么吗？": ["淀粉调匀"],
    },
}

COMPANION = {
    "name": "小伴",
    "description": "用户的 AI 伴侣，陪用户聊日常、给建议。",
    "persona": "温暖、耐心、记性好；会记住用户说过的事，并在之后的聊天里自然地提起。",
}
_SAFE = re.compile(r"[^\w.-]+")


def _file_name(name: str) -> str:
    return _SAFE.sub("_", name).strip("_") or "scenario"


def _gap(days: int) -> str:
    return "long_absence" if days >= 7 else "days" if days >= 1 else "hours"


def _snippet(text: str, size: int = 24) -> str:
    words = text.split()
    if len(words) > 1:  # a spaced language: the first words
        out = ""
        for word in words:
            if len(out) + len(word) + 1 > size:
                break
            out = f"{out} {word}".strip()
        return out or text[:size]
    return text[:size]


def locomo_scenarios(
    path: str | Path, *, conversations: int | None = None, questions: int | None = None
) -> list[dict[str, Any]]:
    """One scenario per LoCoMo conversation (module doc)."""
    out: list[dict[str, Any]] = []
    for conversation in load_locomo(path)[: conversations or None]:
        user, character = conversation.speakers
        turns: list[dict[str, Any]] = []
        pending: list[dict[str, Any]] = []
        last_session: int | None = None  # the session of the last user turn
        by_id = {turn.dia_id: turn for turn in conversation.turns}
        for turn in conversation.turns:
            text = turn.text + (f" [shares a photo: {turn.caption}]" if turn.caption else "")
            if turn.speaker != user:
                pending.append({"display_name": turn.speaker or character, "content": text})
                continue
            item: dict[str, Any] = {"user": text}
            if pending:
                item["lines_before"], pending = pending, []
            if last_session is not None and turn.session != last_session:
                item["session"] = "new"
            last_session = turn.session
            turns.append(item)
        probes = []
        for question in conversation.questions:
            if question.category not in CATEGORIES or not question.evidence:
                continue
            evidence = [by_id[e] for e in question.evidence if e in by_id]
            phrases = [_snippet(turn.text) for turn in evidence]
            if phrases:
                probes.append({"probe": question.question, "expect": {"retrieved": phrases[:3]}})
        if questions is not None:
            probes = probes[:questions]
        if not turns:
            continue
        if probes:
            probes[0] = {**probes[0], "session": "new"}
        out.append(
            {
                "name": f"locomo_{conversation.sample_id}",
                "language": "en",
                "description": f"LoCoMo {conversation.sample_id}: {user} (user) and {character} (character), "
                f"{len(conversation.turns)} turns; probes are its category 1-4 questions (evidence turns' first words).",
                "user_name": user,
                "character": {
                    "name": character,
                    "persona": f"{character}, a friend of {user}; chats about daily life.",
                },
                "background": {
                    "name": f"LoCoMo {conversation.sample_id}",
                    "world": f"{user} and {character} are friends who chat now and then over several months.",
                    "outline": ["catch up on each other's lives", "share plans and news", "keep the friendship going"],
                },
                "turns": turns + probes,
            }
        )
    return out


def _memorybank_files(path: Path) -> tuple[Path, Path]:
    folder = path if path.is_dir() else path.parent
    history = path if path.is_file() else folder / "memory_bank_cn.json"
    questions = folder / "probing_questions_cn.jsonl"
    for file in (history, questions):
        if not file.is_file():
            raise InvalidInput(
                f"{file}: no such file (MemoryBank cn: memory_bank_cn.json and probing_questions_cn.jsonl)"
            )
    return history, questions


def memorybank_scenarios(path: str | Path, *, users: int | None = None) -> list[dict[str, Any]]:
    """One scenario per MemoryBank cn user (module doc)."""
    history_file, questions_file = _memorybank_files(Path(path))
    try:
        data = json.loads(history_file.read_text(encoding="utf-8"))
        asked: dict[str, list[str]] = {}
        for number, line in enumerate(questions_file.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise InvalidInput(f"{questions_file}: line {number} is not a JSON object")
                asked.update({str(k): [str(q) for q in v] for k, v in entry.items()})
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{history_file.parent}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{history_file}: expected an object of users")
    out: list[dict[str, Any]] = []
    for name, user in list(data.items())[: users or None]:
        history = (user or {}).get("history") if isinstance(user, dict) else None
        if not isinstance(history, dict):
            raise InvalidInput(f"{history_file}: user {name!r} has no history object")
        turns: list[dict[str, Any]] = []
        previous: date | None = None
        for day, pairs in sorted(history.items()):
            try:
                when = date.fromisoformat(day)
            except ValueError:
                raise InvalidInput(f"{history_file}: user {name!r}: {day!r} is no date (YYYY-MM-DD)") from None
            first = True
            for pair in pairs or []:
                query = str((pair or {}).get("query") or "").strip()
                if not query:
                    continue
                item: dict[str, Any] = {"user": query}
                if first and previous is not None:
                    item.update(session="new", gap=_gap((when - previous).days))
                first = False
                turns.append(item)
            previous = when
        if not turns:
            continue
        labels = MEMORYBANK_LABELS.get(name, {})
        final: list[dict[str, Any]] = []
        for question in asked.get(name, []):
            phrases = labels.get(question)
            final.append({"probe": question, "expect": {"retrieved": phrases}} if phrases else {"user": question})
        if final:
            final[0] = {**final[0], "session": "new", "gap": "days"}
        out.append(
            {
                "name": f"memorybank_{name}",
                "language": "zh",
                "description": f"MemoryBank cn：{name} 的 {len(history)} 天陪伴聊天；最后一次会话问起之前的事"
                f"（{len(labels)} 个问题有人工标注，作为探针；其余只作驱动）。",
                "user_name": name,
                "character": COMPANION,
                "background": {
                    "name": "日常陪伴",
                    "world": f"{name}每天和 AI 伴侣聊聊生活、兴趣和烦恼。",
                    "outline": ["互相认识", "分享日常与兴趣", "倾诉烦恼并得到建议", "回顾一起聊过的事"],
                },
                "turns": turns + final,
            }
        )
    return out


def write_scenarios(scenarios: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Validate each scenario like a file, then write it as YAML into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for scenario in scenarios:
        target = out / f"{_file_name(scenario['name'])}.yaml"
        parse_document(scenario, str(target))
        target.write_text(yaml.safe_dump(scenario, allow_unicode=True, sort_keys=False, width=200), encoding="utf-8")
        written.append(target)
    return written


def _run(args: argparse.Namespace) -> int:
    if args.kind == "locomo":
        scenarios = locomo_scenarios(args.path, conversations=args.limit, questions=args.questions)
    else:
        scenarios = memorybank_scenarios(args.path, users=args.limit)
    out = Path(args.out or f"scenarios-{args.kind}")
    written = write_scenarios(scenarios, out)
    probes = sum(1 for s in scenarios for t in s["turns"] if "probe" in t)
    turns = sum(len(s["turns"]) for s in scenarios)
    for path in written:
        print(path)
    print(f"{len(written)} scenario(s), {turns:,} turns, {probes} probes → {out} (run: personalab eval run {out})")
    return 0


def register(kinds: argparse._SubParsersAction) -> None:
    convert = kinds.add_parser("convert", help="public dialogue data (LoCoMo, MemoryBank cn) as scenario files")
    convert.add_argument("kind", choices=["locomo", "memorybank"])
    convert.add_argument("path", help="locomo10.json, or the MemoryBank cn folder (read, never copied)")
    convert.add_argument("--out", help="folder for the scenario files (default scenarios-<kind>)")
    convert.add_argument("--limit", type=int, help="only the first N conversations / users")
    convert.add_argument("--questions", type=int, help="LoCoMo: at most N probes per conversation")
    convert.set_defaults(handler=_run)
