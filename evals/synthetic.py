"""Deterministic synthetic dialogue for benchmarks: a multi-character scene of any length."""

from __future__ import annotations

import random
from typing import Any

SPEAKERS: list[dict[str, Any]] = [
    {"attribute": "assistant", "role_id": 1, "display_name": "钦灵"},
    {"attribute": "assistant", "script_role_id": "1", "display_name": "白小喵"},
    {"attribute": "assistant", "display_name": "旁白"},
    {"attribute": "user", "display_name": "莱姆"},
]
EMOTIONS = ["开心", "好奇", "担心", "难为情", "", None]


def synthetic_lines(count: int, seed: int = 7) -> list[dict[str, Any]]:
    """`count` lines: the character, a script NPC, narration and the user, in a random but fixed order."""
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = []
    for i in range(count):
        speaker = SPEAKERS[rng.randrange(len(SPEAKERS))]
        line: dict[str, Any] = {"id": i + 1, "content": f"第{i}句台词,今天天气不错。", **speaker}
        if speaker["attribute"] == "assistant":
            line["original_emotion"] = rng.choice(EMOTIONS)
            line["tts_content"] = "今日はいい天気" if rng.random() < 0.5 else None
            line["action_content"] = "点头" if rng.random() < 0.3 else None
        lines.append(line)
    return lines
