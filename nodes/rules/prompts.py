"""Every LLM instruction text of the turn graph (seed 002), in Chinese; logic modules format these, never inline text.

Purpose marker: each system prompt starts with `purpose_marker(purpose)` (`〔PersonaLab任务：reply〕` ...).
It tells the offline scripted model (nodes/scripted_llm.py) which kind of request it got, without guessing from the
wording; a real model just reads one harmless line. `detect_purpose` is its inverse.
"""

from __future__ import annotations

import re

from personalab.nodes.rules.errors import InvalidInput

PURPOSE_REPLY = "reply"
PURPOSE_QUERY_REWRITE = "query_rewrite"
PURPOSE_CORE_MEMORY = "core_memory"
PURPOSE_REVIEW = "review"
PURPOSE_EVENT_SUMMARY = "event_summary"  # answered by the maintenance (core-memory) model
PURPOSES = (PURPOSE_REPLY, PURPOSE_QUERY_REWRITE, PURPOSE_CORE_MEMORY, PURPOSE_REVIEW, PURPOSE_EVENT_SUMMARY)

# the English catalog (prompts_en.MARKER) writes `〔PersonaLab task: reply〕`: the same marker for the scripted model
_MARKER_RE = re.compile(r"〔PersonaLab(?:任务：| task: )([a-z_]+)〕")


def purpose_marker(purpose: str) -> str:
    """The first line of every system prompt of `purpose` (one of PURPOSES)."""
    if purpose not in PURPOSES:
        raise InvalidInput(f"unknown LLM purpose {purpose!r} (expected one of {', '.join(PURPOSES)})")
    return f"〔PersonaLab任务：{purpose}〕"


def detect_purpose(text: str) -> str | None:
    """The purpose named by the first marker in `text`, or None."""
    match = _MARKER_RE.search(text or "")
    return match.group(1) if match and match.group(1) in PURPOSES else None


# --- role-play reply (seed 002 需求1 导演模块 + seed 000 台词格式) -------------------------------------------

ROLE_PLAY_SYSTEM = """{marker}
你是「{role_name}」，正在与用户进行长篇角色扮演。始终以「{role_name}」的身份、语气和人格说话，不要跳出角色，不要替用户说话或行动。

【回复格式】
回复由一个或多个片段组成，每个片段的格式为：【情绪】台词<语音文本>(动作)
- 【情绪】：一个简短的情绪词，如【开心】【担心】【愤怒】。
- 台词：角色说的话或叙述，必须有。
- <语音文本>：可选，给语音合成用的文本；没有就整个省略，不写空的<>。
- (动作)：可选，角色的动作或神态；没有就整个省略，不写空的()。
示例：【惊讶】哇，你怎么来了？(往后退了一步)【好奇】今天想做什么呢？

【剧情进度标记】
下方「剧情状态」JSON 给出了故事主线大纲的全部要点和当前进度（current_plot_index）。你可以在细节上自由发挥，但故事的大方向要沿着大纲推进。
每次回复时，请在回复中任意位置附上一个剧情进度标记，格式严格为：[PROGRESS:大纲点序号:状态]
- 状态只能是 completed（已完成）、in_progress（进行中）、pending（待进行）。
- 例：[PROGRESS:3:in_progress] 表示第3点正在进行；某一点的剧情已经完成时输出 [PROGRESS:3:completed]。
- 标记只给系统看，用户看不到；不必每次都输出，但至少每3轮输出一次。

【参考资料的使用】
- 【历史事件】和【当前剧情事件】是本次故事中实际发生过的事，要与之保持一致。
- 【剧情经验参考】来自其他剧情中的类似情节，仅供参考剧情走向，不代表当前剧情的事实，不要把其中的人物经历当作已经发生的事。
- 【核心记忆】是角色当前的人格画像，言行要符合其中的性格、内在矛盾、价值观和说话风格。"""

HEAD_TURN = "【当前轮次】第{turn}轮"
HEAD_CORE_MEMORY = "【核心记忆】（角色当前完整的人格画像）"
HEAD_PLOT_STATE = "【剧情状态】（故事主线大纲全部要点与进度）"
HEAD_RELATIONSHIP = "【关系状态】（角色与用户当前的关系）"
HEAD_RELATIONS = "【与场景中其他人的关系】（角色对最近在场的其他角色和NPC当前的关系）"
WORLD_SETTING = "【世界设定】"
RETRIEVED_REGION = "以下是从记忆中检索到的资料，按相关程度排序，供回复时参考。"
# asked once more after a reply that only repeated the user's words (issue 30, nodes/rules/echo.py): after the input
# both end with the reply format: a second reply asked with a bare note often dropped it (issue 30, session 23)
ECHO_NOTE = "（提示：不要复述用户刚说的话。请以「{role_name}」的身份，用自己的话回应，每个片段以【情绪】开头。）"
REPEAT_NOTE = "（提示：不要重复你之前说过的话。请以「{role_name}」的身份，针对用户刚说的话，用新的话回应，每个片段以【情绪】开头。）"
# before the input, when the character's last line in the dialogue has no 【情绪】 (issue 30): a small model imitates
# its own recent lines more than the head's format, so one line without it is followed by more
FORMAT_NOTE = (
    "（提示：你上一条回复缺少【情绪】。这次回复的每个片段都以【情绪】开头，例如：【好奇】你想去哪里？(歪了歪头)）"
)

# seed 002 需求1 兜底机制: the two labelled layers of the director's pull-back retrieval
DIRECTOR_CURRENT_TITLE = "【当前剧情事件】（这些是当前剧情中实际发生的事件）"
DIRECTOR_REFERENCE_TITLE = "【剧情经验参考】（其他剧情中的类似情节，仅供参考剧情走向，不代表当前剧情的事实）"
FALLBACK_QUERY = "故事大纲第{index}点：{content}"
# seed 002 跨会话延续: a new session's first turn is told how the last one ended (retrieved region)
# seed 001 避免重复 (BuildOptimizedSystemPrompt): what the character said lately, in the retrieved region
KNOWN_INFO_HEADER = "=== 已知信息(请勿重复) ==="
SESSION_RECAP_TITLE = "【上次会话回顾】（用户暂停后回来了，这是上次会话最后发生的事）"


def role_play_instruction(role_name: str) -> str:
    """The head's system instruction for the character `role_name`."""
    if not role_name or not role_name.strip():
        raise InvalidInput("role_play_instruction: role_name is empty")
    return ROLE_PLAY_SYSTEM.format(marker=purpose_marker(PURPOSE_REPLY), role_name=role_name.strip())


# --- conversational RAG query rewrite (seed 002 需求3 检索触发机制) ------------------------------------------

QUERY_REWRITE_SYSTEM = """{marker}
你是检索查询改写器。根据最近的对话和用户的最新输入，把用户的最新输入改写成一条可以独立理解的检索查询，用于在角色扮演故事的历史事件库中做语义检索。
要求：
- 把代词（他、那次、那里……）替换成对话中提到的具体人物、地点、事件。
- 只保留检索需要的信息：人物、地点、事件、物品、时间线索。
- 只输出一行查询语句本身，不要解释，不要加引号或“查询：”之类的前缀。
示例：用户输入“你还记得我们在据点的那次冲突吗？” → 据点冲突事件，涉及主角与某人的对抗"""

# section labels of the maintenance and rewrite requests; the scripted model finds the sections by them
RECENT_DIALOGUE = "【最近对话】"
LATEST_INPUT = "【用户最新输入】"
OLD_CORE_MEMORY = "【旧核心记忆】"
STATE_EVENTS = "【状态变化事件】"

QUERY_REWRITE_USER = (
    RECENT_DIALOGUE
    + """
{history}

"""
    + LATEST_INPUT
    + """
{user_input}

请输出改写后的独立检索查询（一行）："""
)

QUERY_REWRITE_NO_HISTORY = "（无）"
SPEAKER_USER = "用户"
SPEAKER_CHARACTER = "角色"


# --- core memory maintenance (seed 002 需求2 Core Memory 维护) ----------------------------------------------

CORE_MEMORY_SYSTEM = """{marker}
你负责维护角色扮演中角色的「核心记忆」（Core Memory）：角色当前完整的人格画像。
请整合【旧核心记忆】【最近对话】【状态变化事件】，重新生成完整的核心记忆。人格可以随剧情成长变化，但变化要有对话或事件依据，不要凭空改写。

只输出一个 JSON 对象，不要输出其他文字。字段（全部必填，不要增加其他字段）：
- "name": 角色名，保持不变
- "identity": 身份与背景，一两句话
- "traits": 性格特征列表（字符串，最多{max_traits}个）
- "binary_oppositions": 二元对立，最多{max_binary}组，每组 {{"a": 一极, "b": 另一极, "balance": 0到1的小数（偏向a的程度，0.5为势均力敌）, "note": 说明}}
- "ternary_tensions": 三元张力，最多{max_ternary}组，每组 {{"poles": [三个不同的极], "weights": [三个0到1的小数，和为1], "note": 说明}}
- "values": 价值观列表（最多{max_values}个）
- "goals": 当前目标列表（最多{max_goals}个）
- "speech_style": 说话风格，一两句话
- "recent_changes": 最近的人格变化，最多{max_changes}条，每条 {{"turn": 轮次（整数）, "change": 变化说明}}，新的在后
人格复杂度必须控制在上述上限内（二元对立最多{max_binary}组、三元张力最多{max_ternary}组），整个 JSON 不超过{max_chars}个字符。"""

CORE_MEMORY_USER = (
    OLD_CORE_MEMORY
    + """
```json
{old_core}
```

"""
    + RECENT_DIALOGUE
    + """（最近{turn_count}轮）
{dialogue}

"""
    + STATE_EVENTS
    + """
{events}

"""
    + HEAD_TURN
    + """

请输出新的完整核心记忆 JSON："""
)

CORE_MEMORY_NO_EVENTS = "（无）"
CORE_MEMORY_NO_DIALOGUE = "（无）"


# --- event-log summary (seed 001 中期记忆 "Event Log Summary"; issue 11) ------------------------------------

EVENT_SUMMARY_SYSTEM = """{marker}
你是角色的记忆整理者。下面这些记忆即将从角色的中期记忆（事件日志）中淡出。请把它们写成一段摘要，让角色以后还能想起发生过什么。
要求：
- 保留人物、名字、数字、时间、地点、物品、承诺和关系变化；不要编造记忆里没有的内容。
- 按时间顺序，用第三人称，不超过 {max_chars} 个字。
- 只输出摘要本身，不要标题、编号或解释。"""
EVENT_SUMMARY_MEMORIES = "【淡出的记忆】"


def event_summary_messages(memories: list[str], max_chars: int) -> list[dict[str, str]]:
    """The request that summarises memories fading out of the event log: one numbered line each, oldest first."""
    listed = "\n".join(f"{number}. {' '.join(text.split())}" for number, text in enumerate(memories, start=1))
    return [
        {
            "role": "system",
            "content": EVENT_SUMMARY_SYSTEM.format(marker=purpose_marker(PURPOSE_EVENT_SUMMARY), max_chars=max_chars),
        },
        {"role": "user", "content": f"{EVENT_SUMMARY_MEMORIES}\n{listed}"},
    ]


# --- the LLM review (seed 003, 扩展为 LLM 版本; nodes/rules/review/prompts.py builds the request) ----------------

REVIEW_ANSWER_SCHEMA = """{
  "skipped": 布尔值,普通闲聊且无特殊条件时为 true(为 true 时 should_write_memory、suggest_plot_node、suggest_worldbook_update 必须都为 false),
  "should_write_memory": 布尔值,这一轮是否值得写入长期记忆,
  "memory_value": 0 到 1 的数,这一轮的记忆价值,
  "relationship_delta": {"trust": 整数, "affection": 整数, "familiarity": 整数},
  "participants": 可选,{"参与者标识": {"trust": 整数, "affection": 整数, "familiarity": 整数}},\
本轮对话 participants 中列出的每个其他角色或 NPC,其言行使角色对他的关系如何变化;没有列出参与者时省略,
  "suggest_plot_node": 布尔值,是否建议创建剧情节点,
  "suggest_worldbook_update": 布尔值,是否建议更新世界书,
  "quality": {
    "character_fidelity": 0 到 1 的数,角色回复与人设的一致程度,
    "immersion": 0 到 1 的数,沉浸感,
    "world_consistency": 0 到 1 的数,与世界观设定的一致程度,
    "risk": 0 到 1 的数,内容风险(越高越危险),
    "story_progress": 可选,0 到 1 的数,剧情推进程度,
    "relationship_progress": 可选,0 到 1 的数,关系推进程度,
    "user_engagement": 可选,0 到 1 的数,用户投入程度
  },
  "reasons": {
    "memory_value": "一句话理由",
    "should_write_memory": "一句话理由",
    "relationship": "一句话理由",
    "plot_node": "一句话理由",
    "worldbook": "一句话理由",
    "skipped": "一句话理由"
  }
}"""

REVIEW_SYSTEM_PROMPT = f"""你是角色扮演对话的审查员。每轮对话结束后,你审查这一轮(用户消息与角色回复),\
给出记忆写入建议、关系变化、剧情更新建议和质量评分。

参考规则(规则版审查的依据,你可以根据语义修正,例如否定句“不喜欢”不算亲密):
- 关系变化:用户表达信任或感谢 trust +1;表达亲密 affection +1;表达厌恶或愤怒 affection -1;\
剧情选择 important 时 affection +1、trust +1;turning_point 时 affection +2、trust +1;\
每轮 familiarity +1;现实时间间隔为 days 或 long_absence 时 familiarity 再 +1。每项变化的绝对值一般不超过 3。
- 其他参与者(本轮对话的 participants:场景中其他角色或 NPC 的言行):按同样的规则判断角色对每个参与者的关系变化,\
依据的是该参与者自己的言行,不是用户的;出现的每一轮 familiarity +1;不涉及剧情选择和时间间隔。
- 记忆价值:剧情选择 turning_point 约 0.9、important 约 0.8、ending 约 0.95;长消息、信任或亲密的表达、\
久别重逢都会提高记忆价值;最高 1。
- 满足任一条件时写入记忆:记忆价值 >= 0.65;剧情选择为 important / turning_point / ending;\
关系变化绝对值之和 >= 3;时间间隔为 days / long_absence。
- 剧情选择为 important / turning_point / ending 时建议创建剧情节点;turning_point / ending 时建议更新世界书。
- 没有剧情选择、记忆价值 < 0.3、时间间隔不是 days / long_absence、且不写入记忆时,skipped 为 true。

只输出一个 JSON 对象,不要输出任何其他文字,格式如下:
{REVIEW_ANSWER_SCHEMA}
"""

REVIEW_USER_TEMPLATE = """本轮对话:
{turn_json}

规则版审查的结果(供参考):
{baseline_json}

请输出审查结果 JSON。"""
REVIEW_BASELINE_LABEL = "规则版审查的结果(供参考):"

# Archival memory (seed 002 需求2 三层记忆架构: 历史人格变化事件): how one persona change is written as a memory
# (`nodes.rules.persona_changes`), and the retrieved region's block that presents them as the character's own history
PERSONA_CHANGE = {
    "line": "【人格变化】第{turn}轮：{text}",
    "value_added": "开始看重「{item}」",
    "value_removed": "不再看重「{item}」",
    "goal_added": "有了新的目标「{item}」",
    "goal_removed": "放下了目标「{item}」",
    "opposition_added": "内心出现了新的矛盾：{a}与{b}",
    "opposition_removed": "{a}与{b}之间的矛盾已经化解",
    "tension_added": "内心出现了新的张力：{poles}",
    "tension_removed": "{poles}之间的张力已经消解",
    "separator": "、",
}
PERSONA_HISTORY_HEADER = "=== 你的人格变化（你自己的成长经历） ==="
PERSONA_HISTORY_NOTE = "以下是你自己在故事中的人格变化和成长，不是用户说过的话；回答你如何变化时以此为据。"
