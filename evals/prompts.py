"""Prompts of the evaluation runs (the LLM judge of `eval run --judge`)."""

from __future__ import annotations

JUDGE_SYSTEM = (
    "你是角色扮演对话的评审。根据角色设定、回复前检索到的记忆和用户的提问，给角色的回复打分。"
    "只输出一个 JSON 对象，不要其他文字："
    '{"persona_consistency": 0到1的数字, "memory_used": 0到1的数字, "reason": "一句话理由"}。'
    "persona_consistency：回复是否符合角色的身份、性格和说话风格。"
    "memory_used：回复是否正确用上了检索到的记忆中与提问相关的内容；记忆里没有相关内容时，回复不编造即给 1。"
)


def judge_request(head: str, recalled: str, question: str, reply: str) -> str:
    """The judge's user message: the character (the prompt's head), the recalled memory, the probe, the reply."""
    return (
        f"【角色设定与状态】\n{head[:3000]}\n\n"
        f"【检索到的记忆】\n{recalled[:3000] or '（无）'}\n\n"
        f"【用户的提问】\n{question}\n\n"
        f"【角色的回复】\n{reply}"
    )


# `eval locomo-qa` (issue 30): a standard benchmark's questions answered by the run's model from what a condition
# gives it. LoCoMo is English; the answer is scored by token F1 against the file's answer, so it is asked short.
LOCOMO_QA_SYSTEM = (
    "You answer a question about a long conversation between {a} and {b}. {notes_intro}"
    "Answer with the shortest phrase that answers it (a name, a date, a place, a few words), with no explanation. "
    "For a question about when, give the date."
)
LOCOMO_QA_NOTES = "Use these notes from the conversation (each starts with the date it was said):\n{notes}\n\n"
LOCOMO_QA_NO_NOTES = "You have no notes of it: answer with your best guess.\n\n"


def locomo_qa_system(a: str, b: str, notes: list[str] | None) -> str:
    """The system message of one LoCoMo question: the notes a condition gives (None: no notes at all)."""
    intro = LOCOMO_QA_NO_NOTES if notes is None else LOCOMO_QA_NOTES.format(notes="\n".join(notes) or "(none)")
    return LOCOMO_QA_SYSTEM.format(a=a, b=b, notes_intro=intro)
