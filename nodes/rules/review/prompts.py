"""Prompt texts of the LLM review (seed 003, 扩展为 LLM 版本).

The model gets the turn and the rule review's result as a baseline, and answers with one JSON object in
the shape `REVIEW_ANSWER_SCHEMA` describes; `review.answer` validates it, and the pipeline falls back to the
rule result when it does not fit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from personalab.nodes.rules.prompts import PURPOSE_REVIEW, purpose_marker

REVIEW_ANSWER_SCHEMA = """{
  "skipped": 布尔值,普通闲聊且无特殊条件时为 true(为 true 时 should_write_memory、suggest_plot_node、suggest_worldbook_update 必须都为 false),
  "should_write_memory": 布尔值,这一轮是否值得写入长期记忆,
  "memory_value": 0 到 1 的数,这一轮的记忆价值,
  "relationship_delta": {"trust": 整数, "affection": 整数, "familiarity": 整数},
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


def _dump(value: Any) -> str:
    # default=str: turn_context comes from host code and may hold dates or other non-JSON values.
    return json.dumps(value, ensure_ascii=False, indent=2, default=str)


def build_review_messages(turn: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[BaseMessage]:
    """The chat messages of one LLM review: the instructions, then the turn and the rule baseline."""
    return [
        # the purpose marker lets the offline scripted model answer a review with review JSON
        SystemMessage(content=purpose_marker(PURPOSE_REVIEW) + "\n" + REVIEW_SYSTEM_PROMPT),
        HumanMessage(content=REVIEW_USER_TEMPLATE.format(turn_json=_dump(turn), baseline_json=_dump(baseline))),
    ]
