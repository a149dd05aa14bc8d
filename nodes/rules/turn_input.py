"""What a turn takes from its caller, checked before anything is stored (seed 000 的行格式; seed 002 对话功能): the
user's message, the host's lines before it (narration, other characters), the user's display name, and the new
text of an edited line. Pure rules: the turn's history fetch node, the stores that append lines and the API (for
the HTTP routes, before a run starts) all check with these, so every door refuses the same input with the same
`InvalidInput` naming the item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from personalab.nodes.rules.errors import InvalidInput
from personalab.nodes.rules.validation import bad_character, json_type

# seed 000's line format: the fields a stored line has (`role_id` is the seed's field name, a character's id)
LINE_FIELDS = (
    "original_emotion",
    "predicted_emotion",
    "content",
    "tts_content",
    "action_content",
    "audio_file",
    "attribute",
    "role_id",
    "script_role_id",
    "display_name",
)
ATTRIBUTES = ("user", "assistant", "system")
LINE_TEXT_FIELDS = tuple(name for name in LINE_FIELDS if name != "role_id")


def check_text(value: Any, what: str) -> None:
    """`InvalidInput` naming `what` unless `value` is text without a NUL character or a lone surrogate."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, got {json_type(value)}")
    bad = bad_character(value)
    if bad:
        raise InvalidInput(f"{what} contains {bad}")


def validate_line(line: Mapping[str, Any], where: str) -> None:
    """Raise `InvalidInput` naming `where` for an unknown field, attribute, a missing content, a text field that
    is no text or holds a NUL character, or a `role_id` that is no whole number (whether that character exists
    is checked where the lines are appended, which has the database)."""
    unknown = set(line) - set(LINE_FIELDS)
    if unknown:
        raise InvalidInput(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if line.get("attribute") not in ATTRIBUTES:
        raise InvalidInput(f"{where}: attribute {line.get('attribute')!r} is not one of {', '.join(ATTRIBUTES)}")
    content = line.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput(f"{where}: no content")
    for name in LINE_TEXT_FIELDS:
        if line.get(name) is not None:
            check_text(line[name], f"{where}: field {name!r}")
    role_id = line.get("role_id")
    if role_id is not None and (not isinstance(role_id, int) or isinstance(role_id, bool)):
        raise InvalidInput(
            f"{where}: field 'role_id' must be a whole number (a character's id), got {json_type(role_id)}"
        )


def check_turn_input(
    message: Any, lines_before: Any, max_chars: int, max_lines: int | None = None
) -> list[dict[str, Any]]:
    """The lines to append (host lines, then the user's), or `InvalidInput` naming what is wrong."""
    if not isinstance(message, str) or not message.strip():
        raise InvalidInput("message is empty")
    if len(message) > max_chars:
        raise InvalidInput(f"message is {len(message)} characters, over the limit of {max_chars}")
    if lines_before is None:
        lines_before = []
    if not isinstance(lines_before, Sequence) or isinstance(lines_before, str):
        raise InvalidInput("lines_before must be a list of lines")
    if max_lines is not None and len(lines_before) > max_lines:
        raise InvalidInput(f"lines_before has {len(lines_before)} lines, over the limit of {max_lines}")
    lines: list[dict[str, Any]] = []
    for index, line in enumerate(lines_before, start=1):
        if not isinstance(line, Mapping):
            raise InvalidInput(f"lines_before[{index}] is not an object")
        validate_line(line, f"lines_before[{index}]")
        if len(line["content"]) > max_chars:
            raise InvalidInput(f"lines_before[{index}] is over the limit of {max_chars} characters")
        lines.append(dict(line))
    lines.append({"attribute": "user", "content": message})
    return lines


def check_user_name(user_name: Any, max_chars: int) -> str | None:
    """The user's display name for this turn (None: the default), or `InvalidInput`: a blank or overlong name
    would otherwise be stored on the line and break the review's memory writes."""
    if user_name is None:
        return None
    if not isinstance(user_name, str) or not user_name.strip():
        raise InvalidInput("user_name is blank")
    name = user_name.strip()
    if len(name) > max_chars:
        raise InvalidInput(f"user_name is {len(name)} characters, over the limit of {max_chars}")
    return name


def check_edit_input(text: Any, user_name: Any, max_chars: int, max_name_chars: int) -> None:
    """The new text (and display name) of an edited user line, as a turn takes them: `InvalidInput` naming the
    field ('text' or 'user_name') before anything runs."""
    for name, value in (("text", text), ("user_name", user_name)):
        bad = bad_character(value) if isinstance(value, str) else None
        if bad:
            raise InvalidInput(f"field {name!r} contains {bad}")
    try:
        check_turn_input(text, None, max_chars)
        check_user_name(user_name, max_name_chars)
    except InvalidInput as exc:
        raise InvalidInput(f"field {'user_name' if str(exc).startswith('user_name') else 'text'!r}: {exc}") from None
