"""The prompt's own scaffolding per language (issue 28): `Catalog` holds every heading and instruction the reply
prompt puts around the card's text, and the offline scripted model's canned lines; `catalog_for(language)` gives
the Chinese one (nodes/rules/prompts.py and character.py, unchanged: a Chinese instance's prompt is exactly what
it was) or the English one (nodes/rules/prompts_en.py).

`detect_language(text)`: the language of a card's text when an instance is created without one — `zh` when at
least `CJK_SHARE` of its letters are CJK characters, else `en`. `check_language`: an unsupported language is an
`InvalidInput` listing the supported ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from personalab.nodes.rules import character as zh_character
from personalab.nodes.rules import prompts as zh
from personalab.nodes.rules import prompts_en as en
from personalab.nodes.rules.errors import InvalidInput

LANGUAGES = ("zh", "en")
DEFAULT_LANGUAGE = "zh"
CJK_SHARE = 0.2  # a Chinese card often quotes English names and tags; its share of CJK letters stays well above

# the Chinese open-story instruction (a background made from a card's scenario): ROLE_PLAY_SYSTEM without the
# progress markers and the outline's pull, which an open outline does not have
ZH_OPEN_STORY_SYSTEM = """{marker}
你是「{role_name}」，正在与用户进行长篇角色扮演。始终以「{role_name}」的身份、语气和人格说话，不要跳出角色，不要替用户说话或行动。

【回复格式】
回复由一个或多个片段组成，每个片段的格式为：【情绪】台词<语音文本>(动作)
- 【情绪】：一个简短的情绪词，如【开心】【担心】【愤怒】。
- 台词：角色说的话或叙述，必须有。
- <语音文本>：可选，给语音合成用的文本；没有就整个省略，不写空的<>。
- (动作)：可选，角色的动作或神态；没有就整个省略，不写空的()。
示例：【惊讶】哇，你怎么来了？(往后退了一步)【好奇】今天想做什么呢？

【故事】
这个故事没有固定的大纲：它从下方的【场景】开始，随用户和角色的互动自由发展。

【参考资料的使用】
- 【历史事件】是本次故事中实际发生过的事，要与之保持一致。
- 【核心记忆】是角色当前的人格画像，言行要符合其中的性格、内在矛盾、价值观和说话风格。"""
ZH_SCENARIO_LABEL = "【场景】"
ZH_RECALL_EVENT = "【认真】我想起来了——{event}。"
ZH_RECALL_NOTHING = "【认真】我想起来我们还有正事要办。"


@dataclass(frozen=True)
class Catalog:
    """Every text of the reply prompt's scaffolding in one language."""

    language: str
    marker: str  # the purpose marker, `{purpose}` inside
    role_play_system: str
    open_story_system: str
    head_turn: str
    head_core_memory: str
    head_plot_state: str
    head_relationship: str
    head_relations: str
    world_setting: str
    retrieved_region: str
    director_current_title: str
    director_reference_title: str
    session_recap_title: str
    persona_label: str
    description_label: str
    system_prompt_label: str
    scenario_label: str
    example_dialogue_label: str
    post_history_label: str
    default_user_name: str
    emotions: tuple[str, ...]
    actions: tuple[str, ...]
    openings: tuple[str, ...]
    plot_lines: tuple[str, ...]
    recall_event: str
    recall_nothing: str
    recap_line: str  # one turn of the last session's recap (seed 002 跨会话延续)
    # the names a line gets when nobody is named, and what follows a speaker in a dialogue-record entry
    narrator_name: str = "旁白"
    default_character_name: str = "角色"
    speaker_colon: str = "："
    free_story: str = "自由发展的故事"  # the one outline point of an instance without an outline
    # the scripted model's core-memory rewrite (nodes/scripted_llm.py): traits, first opposition, change, topic
    core_traits: tuple[str, ...] = ()
    core_opposition: Mapping[str, str] = field(default_factory=dict)
    core_change: str = ""
    core_topic: str = ""
    titles: Mapping[str, str] = field(default_factory=dict)
    items: Mapping[str, str] = field(default_factory=dict)
    # one archived persona change (seed 002 历史人格变化事件): its line and the phrases of a structural change
    persona_change: Mapping[str, str] = field(default_factory=lambda: dict(zh.PERSONA_CHANGE))
    echo_note: str = zh.ECHO_NOTE  # after the input, when the reply only repeated it (issue 30)
    repeat_note: str = zh.REPEAT_NOTE  # after the input, when the reply repeated the character's own line
    format_note: str = zh.FORMAT_NOTE  # before the input, when the character's last line had no 【emotion】

    def role_play_instruction(self, role_name: str, *, open_story: bool = False) -> str:
        """The head's system instruction for `role_name`; an open story's asks for no progress markers."""
        if not role_name or not role_name.strip():
            raise InvalidInput("role_play_instruction: role_name is empty")
        if self.language == DEFAULT_LANGUAGE and not open_story:
            return zh.role_play_instruction(role_name)  # exactly the Chinese prompt as it always was
        template = self.open_story_system if open_story else self.role_play_system
        return template.format(marker=self.marker.format(purpose=zh.PURPOSE_REPLY), role_name=role_name.strip())

    def title(self, text: str) -> str:
        """A retrieved block's title (written in Chinese where it is made) in this language."""
        return self.titles.get(text, text)

    def item(self, item: Any) -> Any:
        """A fixed instruction item of a retrieved block (written in Chinese where it is made) in this language;
        any other item as it is."""
        return self.items.get(item, item) if isinstance(item, str) else item

    def labels(self) -> dict[str, str]:
        """The character field labels of the head's character block (character.definition_parts)."""
        return {
            "system_prompt": self.system_prompt_label,
            "persona": self.persona_label,
            "description": self.description_label,
            "scenario": self.scenario_label,
        }


ZH = Catalog(
    language="zh",
    marker="〔PersonaLab任务：{purpose}〕",
    role_play_system=zh.ROLE_PLAY_SYSTEM,
    open_story_system=ZH_OPEN_STORY_SYSTEM,
    head_turn=zh.HEAD_TURN,
    head_core_memory=zh.HEAD_CORE_MEMORY,
    head_plot_state=zh.HEAD_PLOT_STATE,
    head_relationship=zh.HEAD_RELATIONSHIP,
    head_relations=zh.HEAD_RELATIONS,
    world_setting=zh.WORLD_SETTING,
    retrieved_region=zh.RETRIEVED_REGION,
    director_current_title=zh.DIRECTOR_CURRENT_TITLE,
    director_reference_title=zh.DIRECTOR_REFERENCE_TITLE,
    session_recap_title=zh.SESSION_RECAP_TITLE,
    persona_label=zh_character.PERSONA_LABEL,
    description_label=zh_character.DESCRIPTION_LABEL,
    system_prompt_label=zh_character.SYSTEM_PROMPT_LABEL,
    scenario_label=ZH_SCENARIO_LABEL,
    example_dialogue_label=zh_character.EXAMPLE_DIALOGUE_LABEL,
    post_history_label=zh_character.POST_HISTORY_LABEL,
    default_user_name=zh_character.DEFAULT_USER_NAME,
    emotions=("平静", "好奇", "开心", "担心", "认真", "惊讶", "犹豫", "坚定"),
    actions=("轻轻点了点头", "把目光移向远处", "握紧了手中的东西", "叹了口气", "向前走了一步", "沉默了片刻"),
    openings=(
        "你说「{topic}」……让我想一想。",
        "「{topic}」吗？这倒让我有些在意。",
        "关于「{topic}」，我记在心里了。",
        "嗯，「{topic}」，我明白你的意思。",
        "「{topic}」？你这么一说，我想起了不少事。",
    ),
    plot_lines=(
        "说起来，「{point}」这件事，我们得继续往前走。",
        "别忘了，眼下最要紧的是「{point}」。",
        "我有预感，「{point}」就在眼前了。",
    ),
    recall_event=ZH_RECALL_EVENT,
    recall_nothing=ZH_RECALL_NOTHING,
    recap_line="第{turn}轮 用户：{user}／{name}：{reply}",
    core_traits=("谨慎", "重情义", "倔强", "敏锐", "温柔"),
    core_opposition={"a": "信任", "b": "戒备", "note": "对用户的态度仍在摇摆"},
    core_change="与用户谈到「{topic}」后，变得更加{trait}",
    core_topic="近来的经历",
)

EN = Catalog(
    language="en",
    marker=en.MARKER,
    role_play_system=en.ROLE_PLAY_SYSTEM,
    open_story_system=en.OPEN_STORY_SYSTEM,
    head_turn=en.HEAD_TURN,
    head_core_memory=en.HEAD_CORE_MEMORY,
    head_plot_state=en.HEAD_PLOT_STATE,
    head_relationship=en.HEAD_RELATIONSHIP,
    head_relations=en.HEAD_RELATIONS,
    world_setting=en.WORLD_SETTING,
    retrieved_region=en.RETRIEVED_REGION,
    director_current_title=en.DIRECTOR_CURRENT_TITLE,
    director_reference_title=en.DIRECTOR_REFERENCE_TITLE,
    session_recap_title=en.SESSION_RECAP_TITLE,
    persona_label=en.PERSONA_LABEL,
    description_label=en.DESCRIPTION_LABEL,
    system_prompt_label=en.SYSTEM_PROMPT_LABEL,
    scenario_label=en.SCENARIO_LABEL,
    example_dialogue_label=en.EXAMPLE_DIALOGUE_LABEL,
    post_history_label=en.POST_HISTORY_LABEL,
    default_user_name=en.DEFAULT_USER_NAME,
    emotions=en.EMOTIONS,
    actions=en.ACTIONS,
    openings=en.OPENINGS,
    plot_lines=en.PLOT_LINES,
    recall_event=en.RECALL_EVENT,
    recall_nothing=en.RECALL_NOTHING,
    recap_line=en.RECAP_LINE,
    narrator_name=en.NARRATOR_NAME,
    default_character_name=en.DEFAULT_CHARACTER_NAME,
    speaker_colon=en.SPEAKER_COLON,
    free_story=en.FREE_STORY,
    core_traits=en.CORE_TRAITS,
    core_opposition=en.CORE_OPPOSITION,
    core_change=en.CORE_CHANGE,
    core_topic=en.CORE_TOPIC,
    titles=en.TITLES,
    items=en.ITEMS,
    persona_change=en.PERSONA_CHANGE,
    echo_note=en.ECHO_NOTE,
    repeat_note=en.REPEAT_NOTE,
    format_note=en.FORMAT_NOTE,
)

CATALOGS: Mapping[str, Catalog] = {"zh": ZH, "en": EN}


def check_language(language: object, field_name: str = "language") -> str:
    """`language` when supported (case and spaces ignored); `InvalidInput` naming the field and listing the
    supported languages otherwise."""
    code = language.strip().lower() if isinstance(language, str) else None
    if code is None or code not in CATALOGS:
        raise InvalidInput(
            f"{field_name}: {language!r} is not a supported language (supported: {', '.join(LANGUAGES)})"
        )
    return code


def catalog_for(language: str | None) -> Catalog:
    """The catalog of `language`; None (an instance from before issue 28) is Chinese, as its prompts were."""
    return CATALOGS[check_language(language)] if language is not None else ZH


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x3040 <= code <= 0x30FF  # kana (a Japanese card reads better with the CJK scaffolding than English)
        or 0xF900 <= code <= 0xFAFF
        or 0xAC00 <= code <= 0xD7AF  # hangul
    )


def detect_language(*texts: str) -> str:
    """`zh` when at least CJK_SHARE of the letters of `texts` are CJK, `en` when there are letters and fewer;
    DEFAULT_LANGUAGE for no letters at all (a card of punctuation only)."""
    letters = [char for text in texts for char in (text or "") if char.isalpha()]
    if not letters:
        return DEFAULT_LANGUAGE
    share = sum(1 for char in letters if _is_cjk(char)) / len(letters)
    return "zh" if share >= CJK_SHARE else "en"


_HEADING_RE = re.compile(r"^\s*(?:\[([^\]\n]{2,60})\]|【([^】\n]{2,20})】|===\s*([^=\n]+?)\s*===)")


def _catalog_texts(catalog: Catalog) -> list[str]:
    return [
        catalog.role_play_system,
        catalog.open_story_system,
        catalog.head_turn,
        catalog.head_core_memory,
        catalog.head_plot_state,
        catalog.head_relationship,
        catalog.head_relations,
        catalog.world_setting,
        catalog.director_current_title,
        catalog.director_reference_title,
        catalog.session_recap_title,
        catalog.persona_label,
        catalog.description_label,
        catalog.system_prompt_label,
        catalog.scenario_label,
        catalog.example_dialogue_label,
        catalog.post_history_label,
        *catalog.titles.keys(),
        *catalog.titles.values(),
    ]


@lru_cache(maxsize=1)
def scaffolding_headings() -> tuple[str, ...]:
    """The names of the reply prompt's section headings in every language (`[Core memory]`, `【核心记忆】`,
    `=== 相关记忆 ===` → "Core memory", "核心记忆", "相关记忆"): what opens a line of the prompt's own scaffolding,
    never a line of a character's reply (issue 30: the 1.5B model ran on past its answer into them). Only a line's
    opening bracket counts, so the format's example emotions (【开心】, inside a line) are not headings."""
    names: set[str] = set()
    for catalog in CATALOGS.values():
        for text in _catalog_texts(catalog):
            for line in text.splitlines():
                match = _HEADING_RE.match(line)
                if match:
                    name = next(group for group in match.groups() if group).strip()
                    if "{" not in name and not name.upper().startswith("PROGRESS"):
                        names.add(name)
    return tuple(sorted(names, key=len, reverse=True))
