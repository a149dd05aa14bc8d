"""The memory builder (seed 000): a root-to-leaf list of lines → the messages one character sees.

Rules of the seed (记忆构建规则), as implemented here:
- `user` line → its content; user lines carry no emotion / tts / action.
- `system` line → its own `system` message, in history order, when it is the character's own
  (same speaker) or has no speaker identity at all; another character's system line is dropped.
- `assistant` line of the character → `【emotion】content<tts>(action)`; consecutive ones merge into one
  `assistant` message.
- other speakers (other characters, narration) and the user lines that lead up to another speaker go
  into one `{...}` context block of a `user` message, one line each: `name:content` plus `(action)`.
  No tts inside the block, and no 【emotion】 by default (the seed's worked example 2, which the
  fixture file makes the acceptance case; `block_emotion=True` adds it as the seed's prose says).
- user lines that lead up to the character's own reply stand outside the block, after a newline,
  joined with nothing between them.

Same speaker: role_id match, or script_role_id match, or display_name match; only non-empty values
compare, and ids compare as text (`1` and `"1"` are the same id). With no identity argument at all,
every assistant line is the character and every system line is kept (seed example 1).

What the seed leaves open, decided here:
- empty strings count as absent: no 【】, <> or () around an empty field.
- a kept system line ends the pending user message first, so messages stay in history order.
- a dropped system line is invisible: it neither splits a merged reply nor a context block.
- in the block, a speaker's name is its display_name, else its script_role_id, else `角色{role_id}`;
  with none of these an assistant line is narration (`旁白`) and a user line is `用户`.
- a history that ends on user lines after a block (the usual "waiting for the reply" state) ends with
  `{block}\\nuser lines`; one that ends on other speakers ends with a user message of only the block.
- a line whose `attribute` is not user / assistant / system, or whose content is missing or blank,
  raises `ValueError` naming the line id; nothing is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from personalab.nodes.rules.errors import InvalidInput

ATTRIBUTES = frozenset({"user", "assistant", "system"})


def _getter(line: Any) -> Any:
    """A `get(field)` for a dict line (`id` or `line_id`) or a SQLModel `Line`."""
    if isinstance(line, Mapping):
        return line.get
    return lambda name, default=None: getattr(line, name, default)


def _identity_keys(value: Any) -> frozenset[Any]:
    """Every spelling of a non-empty id that counts as the same: `1` and `"1"` alike."""
    if value is None or value == "":
        return frozenset()
    text = str(value)
    keys: set[Any] = {value, text}
    if text.lstrip("-").isdigit():
        keys.add(int(text))
    return frozenset(keys)


def format_own_line(emotion: Any, content: str, tts: Any, action: Any) -> str:
    """`【emotion】content<tts>(action)`, leaving out every empty field with its brackets."""
    return (
        (f"【{emotion}】" if emotion else "")
        + content
        + (f"<{tts}>" if tts else "")
        + (f"({action})" if action else "")
    )


def _speaker_test(
    role_id: int | str | None, script_role_id: str | int | None, display_name: str | None
) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a line (a dict) is the character's own, by the seed's same-speaker rule."""
    role_keys, script_keys, name_keys = map(_identity_keys, (role_id, script_role_id, display_name))
    if not (role_keys or script_keys or name_keys):
        return lambda line: True
    return lambda line: (
        line.get("role_id") in role_keys
        or line.get("script_role_id") in script_keys
        or line.get("display_name") in name_keys
    )


def build_memory(
    lines: Iterable[Any],
    *,
    role_id: int | str | None = None,
    script_role_id: str | int | None = None,
    display_name: str | None = None,
    block_emotion: bool = False,
    language: str | None = None,
) -> list[dict[str, str]]:
    """Build the message list of one character from lines in root-to-leaf order (seed 000). `language`: the
    instance's (issue 28) — the names of an unnamed user (用户 / User), character (角色N / Character N) and
    narration (旁白 / Narrator)."""
    # imported here: the catalog imports the character rules, which import this module through the reply rules
    from personalab.nodes.rules.prompt_catalog import catalog_for

    catalog = catalog_for(language)
    unnamed_user = catalog.default_user_name
    unnamed_role = catalog.default_character_name + (" " if catalog.language != "zh" else "")
    narrator = catalog.narrator_name
    role_keys = _identity_keys(role_id)
    script_keys = _identity_keys(script_role_id)
    name_keys = _identity_keys(display_name)
    anyone = not (role_keys or script_keys or name_keys)

    messages: list[dict[str, str]] = []
    own: list[str] = []  # segments of the character's current reply
    block: list[str] = []  # the {...} context block being collected
    users: list[tuple[str, str]] = []  # user lines not yet placed: (name, content)

    def flush_user() -> None:
        text = "".join([content for _, content in users])
        if block:
            text = "{" + "\n".join(block) + "}" + ("\n" + text if text else "")
        messages.append({"role": "user", "content": text})
        block.clear()
        users.clear()

    def flush_own() -> None:
        messages.append({"role": "assistant", "content": "".join(own)})
        own.clear()

    for line in lines:
        get = line.get if type(line) is dict else _getter(line)
        attribute = get("attribute")
        content = get("content")
        if attribute not in ATTRIBUTES:
            raise InvalidInput(
                f"line {get('id', get('line_id'))}: unknown attribute {attribute!r} (expected user, assistant or system)"
            )
        if not content or type(content) is not str or content.isspace():
            raise InvalidInput(f"line {get('id', get('line_id'))}: no content")

        if attribute == "user":
            if own:
                flush_own()
            users.append((get("display_name") or unnamed_user, content))
            continue

        rid, sid, name = get("role_id"), get("script_role_id"), get("display_name")
        same = anyone or rid in role_keys or sid in script_keys or name in name_keys
        if attribute == "system":
            if same or not (rid or sid or name):
                if own:
                    flush_own()
                if users or block:
                    flush_user()
                messages.append({"role": "system", "content": content})
        elif same:
            if users or block:
                flush_user()
            emotion, tts, action = get("original_emotion"), get("tts_content"), get("action_content")
            # format_own_line, inlined: this branch runs for most lines of a long history
            own.append(
                (f"【{emotion}】" if emotion else "")
                + content
                + (f"<{tts}>" if tts else "")
                + (f"({action})" if action else "")
            )
        else:
            if own:
                flush_own()
            if users:
                # user lines answered by another speaker are part of the scene, not the prompt
                block.extend([f"{who}:{said}" for who, said in users])
                users.clear()
            speaker = name or sid or (f"{unnamed_role}{rid}" if rid or rid == 0 else narrator)
            emotion = get("original_emotion") if block_emotion else None
            action = get("action_content")
            block.append(
                f"{speaker}:" + (f"【{emotion}】" if emotion else "") + content + (f"({action})" if action else "")
            )

    if own:
        flush_own()
    if users or block:
        flush_user()
    return messages


def recall_window(
    path: Sequence[Mapping[str, Any] | None],
    turns: int,
    *,
    role_id: int | str | None = None,
    script_role_id: str | int | None = None,
    display_name: str | None = None,
) -> tuple[int, int] | None:
    """Which lines of a long path a turn needs (seed 002: recall memory is the last turns, not the whole path):
    `(head_end, tail_start)` — building `path[:head_end] + path[tail_start:]` gives the messages of the whole
    path's preamble and at least its last `turns` turns, the same as building the whole path; what lies between
    is older turns, which the prompt drops anyway. `head_end == tail_start`: nothing to leave out.

    `path` needs only `attribute` and the identity fields. Both cuts are at a clean point: a user line right
    after one of the character's own assistant lines, where `build_memory` has nothing pending but that reply,
    so what comes before and after builds the same either way. Each clean point starts a turn (there may be
    more turns than clean points), so the tail from the `turns`-th last clean point holds at least `turns`.

    A line not read yet may be None (the middle of a long path): the answer is None when the lines read do
    not settle it — the first clean point, or the last `turns`, lie among the unread ones — so read more."""
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise InvalidInput(f"recall_window: turns must be a positive integer, got {turns!r}")
    is_own = _speaker_test(role_id, script_role_id, display_name)

    def clean(index: int) -> bool | None:
        line, before = path[index], path[index - 1]
        if line is None or before is None:
            return None
        return line.get("attribute") == "user" and before.get("attribute") == "assistant" and is_own(before)

    size = len(path)
    first = None
    for index in range(1, size):
        found = clean(index)
        if found is None:
            return None
        if found:
            first = index
            break
    if first is None:
        return size, size
    last: list[int] = []
    for index in range(size - 1, first, -1):
        found = clean(index)
        if found is None:
            return None
        if found:
            last.append(index)
            if len(last) == turns:
                return first, index
    return size, size
