"""`personalab demo`: the seed's multi-character scene, stored and rebuilt per character."""

from __future__ import annotations

import argparse
import json
from importlib import resources
from typing import Any

from nodes.memory_build import build_memory
from stores.config import database_url
from stores.db import session_scope
from stores.history import get_chat_history
from stores.saves import append_lines, create_background, create_role, create_save

SAMPLE_ROLE_ID = 1  # the role id the seed's example uses for 钦灵


def load_sample(name: str = "seed_multi_character.json") -> dict[str, Any]:
    return json.loads(resources.files("graph.samples").joinpath(name).read_text(encoding="utf-8"))


def store_sample_scene() -> tuple[int, int]:
    """Store the seed 000 example 2 scene as a new instance; returns (save id, 钦灵's role id)."""
    sample = load_sample()
    with session_scope() as session:
        role = create_role(session, **sample["role"])
        background = create_background(session, **sample["background"])
        save = create_save(session, role.id, background.id, title="seed 000 example 2")
        lines = [
            {**line, "role_id": role.id} if line.get("role_id") == SAMPLE_ROLE_ID else line for line in sample["lines"]
        ]
        append_lines(session, save.id, lines)  # type: ignore[arg-type]
        return save.id, role.id  # type: ignore[return-value]


def run_demo(_args: argparse.Namespace) -> int:
    save_id, role_id = store_sample_scene()
    print(f"database: {database_url()}")
    print(f"stored seed 000 example 2 as instance {save_id}\n")
    with session_scope() as session:
        history = get_chat_history(session, save_id)
        views = [
            (f"钦灵 (role_id={role_id})", build_memory(history, role_id=role_id)),
            ("白小喵 (script_role_id='1')", build_memory(history, script_role_id="1")),
        ]
    for title, messages in views:
        print(f"=== memory of {title}: {len(messages)} messages")
        for message in messages:
            print(f"[{message['role']}] {message['content']}")
        print()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="store the seed's multi-character scene and print each character's memory")
    parser.set_defaults(handler=run_demo)
