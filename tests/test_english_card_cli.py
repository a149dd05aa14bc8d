"""An English card plays with no Chinese scaffolding (issue 28), through the real `personalab` command line: an
English SillyTavern card imported, `instance create --character N` alone (no background, no user name), a persona
chosen, turns played with the offline scripted model (a new session, a narration line) — and nothing the project
wrote is Chinese: not in the reply prompts, the dialogue-record entries (``speaker: text``), the session recap,
`history`, `instance show` or the exported instance. Only the card's, the user's and the model's own text could be.
On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
EN_CARD = FIXTURES / "card_v2_lighthouse_en.json"
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")
# the reply format's emotion brackets are reply syntax in both languages (【emotion】line); the purpose marker is a
# machine tag the offline model reads
FORMAT = re.compile(r"[【】]|〔PersonaLab task: [a-z_]+〕")
MESSAGES = ("Where am I?", "What happened to my boat?", "Thank you, Mira. I trust you.")
LAST = "Tell me about the village."
NARRATION = "Thunder rolls over the lamp room."


def _cli(env: dict[str, str], *args: str) -> str:
    exe = Path(sys.executable).with_name("personalab")
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


def _scaffolding(text: str, own: list[str]) -> str:
    """`text` without what the card, the user and the model wrote (they may be in any language)."""
    for piece in sorted((p for p in own if p), key=len, reverse=True):
        text = text.replace(piece, "")
    return FORMAT.sub("", text)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_an_english_card_plays_with_no_chinese_scaffolding(db_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PERSONALAB_DATA_DIR": str(tmp_path / "cli"), "PERSONALAB_DATABASE_URL": db_url}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PERSONALAB_LLM", "PERSONALAB_MODEL"):
        env.pop(name, None)  # the offline scripted model
    (tmp_path / "cli").mkdir()
    imported = json.loads(_cli(env, "card", "import", str(EN_CARD), "--json"))
    character_id = imported["character_id"]
    instance_id = int(_cli(env, "instance", "create", "--character", str(character_id)).strip())
    persona_id = int(_cli(env, "persona", "create", "--name", "Ash", "--description", "A sailor.").strip())
    _cli(env, "instance", "persona", "--instance", str(instance_id), "--persona", str(persona_id))

    turns = [json.loads(_cli(env, "turn", "--instance", str(instance_id), "--json", m)) for m in MESSAGES]
    _cli(env, "session", "new", "--instance", str(instance_id))
    lines_before = json.dumps([{"attribute": "system", "content": NARRATION}])
    turns.append(
        json.loads(_cli(env, "turn", "--instance", str(instance_id), "--json", "--lines-before", lines_before, LAST))
    )
    for turn in turns:
        assert not turn["error"], turn["error"]

    card = json.loads(EN_CARD.read_text(encoding="utf-8"))["data"]
    own = [*_strings(card), *MESSAGES, LAST, NARRATION, "A sailor."]
    own += [turn["reply_raw"] for turn in turns] + [turn["reply"] for turn in turns]
    # every prompt message the project wrote
    for turn in turns:
        for message in turn["prompt"]:
            left = _scaffolding(message["content"], own)
            assert not CJK.search(left), (turn["turn"], message.get("region"), CJK.findall(left)[:10], left[:500])
    # the new session's recap names the user by the persona, in English
    retrieved = "\n".join(m["content"] for m in turns[-1]["prompt"] if m.get("region") == "retrieved")
    assert "Turn 1 Ash: Where am I?" in retrieved, retrieved

    history = _cli(env, "history", "--instance", str(instance_id))
    assert f"Narrator: {NARRATION}" in history and "Ash: Where am I?" in history, history
    show = _cli(env, "instance", "show", str(instance_id))
    shown = json.loads(_cli(env, "instance", "show", str(instance_id), "--json"))
    assert shown["language"] == "en"
    export = tmp_path / "instance.json"
    _cli(env, "instance", "export", str(instance_id), str(export))
    exported = json.loads(export.read_text(encoding="utf-8"))
    records = [row["content"] for row in exported["tables"]["memory_entry"] if row.get("type") == "record"]
    assert any(r.endswith("Ash: Where am I?") for r in records), records
    assert any(r.endswith(f"Narrator: {NARRATION}") for r in records), records
    for where, text in (
        ("history", history),
        ("instance show", show),
        ("instance show --json", json.dumps(shown, ensure_ascii=False)),
        ("export", json.dumps(exported, ensure_ascii=False)),
    ):
        left = _scaffolding(text, own)
        assert not CJK.search(left), (where, CJK.findall(left)[:10], left[:800])
