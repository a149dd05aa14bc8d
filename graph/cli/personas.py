"""`personalab persona create|list|show|edit|delete|avatar` and `personalab instance persona`: user personas
(issue 28, SillyTavern's personas) on the command line, a thin layer over `PersonaLab(...).personas`. Every
command takes `--json`; bad input is one line on stderr and exit code 2 (graph/cli/__init__.py)."""

from __future__ import annotations

import argparse
from typing import Any

from personalab.graph.api.schemas.library import MAX_AVATAR_BYTES
from personalab.graph.api.schemas.personas import PersonaOut
from personalab.graph.api.support import read_file, write_file
from personalab.graph.cli.args import ID, lab
from personalab.graph.cli.library import _json_flag, _owner_option, _print


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if args.name is not None:
        fields["name"] = args.name
    if args.description is not None:
        fields["description"] = args.description
    if args.avatar is not None:
        fields["avatar"] = read_file(args.avatar, MAX_AVATAR_BYTES, what="avatar")
    return fields


def _lines(item: PersonaOut) -> list[str]:
    avatar = f"{item.avatar_mime}, {item.avatar_bytes} bytes" if item.avatar_bytes else "none"
    rows = [f"persona {item.id}: {item.name}", f"  avatar: {avatar}"]
    if item.description:
        rows.append(f"  description: {item.description}")
    rows.append(f"  instances: {', '.join(map(str, item.instances)) or 'none'}")
    return rows


def _cmd_persona(args: argparse.Namespace) -> int:
    personas = lab(args).personas
    if args.action == "create":
        item = personas.create(_fields(args))
        return _print(item, args.json, [str(item.id)])
    if args.action == "list":
        items = personas.list()
        return _print(items, args.json, [f"{p.id:>4}  {p.name}  ({len(p.instances)} instance(s))" for p in items])
    if args.action == "show":
        item = personas.get(args.id)
        return _print(item, args.json, _lines(item))
    if args.action == "edit":
        changes = _fields(args)
        if args.remove_avatar:
            changes["remove_avatar"] = True
        item = personas.edit(args.id, changes)
        return _print(item, args.json, _lines(item))
    if args.action == "avatar":
        data, _mime = personas.avatar(args.id)
        write_file(args.file, data, overwrite=args.overwrite)
        return _print({"id": args.id, "file": args.file, "bytes": len(data)}, args.json, [args.file])
    deleted = personas.delete(args.id)
    extra = (
        f"; instance(s) {', '.join(map(str, deleted.instances_cleared))} play without one"
        if deleted.instances_cleared
        else ""
    )
    return _print(deleted, args.json, [f"deleted persona {deleted.id}{extra}"])


def cmd_instance_persona(args: argparse.Namespace) -> int:
    """`instance persona --instance N (--persona P | --none)`: the persona the instance plays with."""
    item = lab(args).personas.use(args.instance, None if args.none else args.persona)
    shown = (
        f"instance {item.id} plays with persona {item.persona_id}"
        if item.persona_id
        else f"instance {item.id} plays with no persona"
    )
    return _print(item, args.json, [shown])


def add_instance_persona_parser(actions: argparse._SubParsersAction) -> None:
    """`instance persona`, registered by `instance`'s module."""
    chosen = actions.add_parser("persona", help="the user persona an instance plays with (issue 28)")
    chosen.add_argument("--instance", type=ID, required=True)
    which = chosen.add_mutually_exclusive_group(required=True)
    which.add_argument("--persona", type=ID, help="a persona id (persona list)")
    which.add_argument("--none", action="store_true", help="play with no persona (the user name per turn)")
    _json_flag(chosen)


def _options(parser: argparse.ArgumentParser, *, create: bool) -> None:
    parser.add_argument("--name", required=create, help="the name {{user}} becomes")
    parser.add_argument("--description", help="what the character knows of the user (prompt head)")
    parser.add_argument("--avatar", help="an image file (PNG, JPEG, GIF, WebP…)")
    _json_flag(parser)


def register(sub: argparse._SubParsersAction) -> None:
    persona = sub.add_parser("persona", help="user personas: create, list, show, edit, delete (issue 28)")
    actions = persona.add_subparsers(dest="action", required=True, parser_class=type(persona))
    _options(actions.add_parser("create", help="store a new persona, print its id"), create=True)
    _json_flag(_owner_option(actions.add_parser("list", help="every persona")))
    show = actions.add_parser("show", help="one persona")
    show.add_argument("id", type=ID)
    _json_flag(show)
    edit = actions.add_parser("edit", help="change the fields given")
    edit.add_argument("id", type=ID)
    _options(edit, create=False)
    edit.add_argument("--remove-avatar", action="store_true")
    avatar = actions.add_parser("avatar", help="write the persona's avatar image to a file")
    avatar.add_argument("id", type=ID)
    avatar.add_argument("file")
    avatar.add_argument("--overwrite", action="store_true")
    _json_flag(avatar)
    delete = actions.add_parser("delete", help="delete a persona (its instances go on without one)")
    delete.add_argument("id", type=ID)
    _json_flag(delete)
    persona.set_defaults(handler=_cmd_persona)
