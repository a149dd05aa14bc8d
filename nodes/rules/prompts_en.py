"""The English prompt catalog (issue 28): every text of the reply prompt's own scaffolding, as nodes/rules/prompts.py
(Chinese) has it, for an instance whose language is `en`. Same names, same placeholders; logic modules reach these
through `nodes.rules.prompt_catalog.catalog_for`, never inline text.
"""

from __future__ import annotations

MARKER = "〔PersonaLab task: {purpose}〕"

ROLE_PLAY_SYSTEM = """{marker}
You are "{role_name}", in a long role-play with the user. Always speak with the identity, voice and personality of "{role_name}"; never step out of character, never speak or act for the user.

[Reply format]
A reply is one or more segments, each of the form: 【emotion】line<speech text>(action)
- 【emotion】: one short emotion word, such as 【happy】【worried】【angry】.
- line: what the character says or narrates; required.
- <speech text>: optional, the text for speech synthesis; leave it out entirely when there is none, never an empty <>.
- (action): optional, the character's action or expression; leave it out entirely when there is none, never an empty ().
Example: 【surprised】Oh, you came? (takes a step back)【curious】What shall we do today?

[Story progress markers]
The "Plot state" JSON below gives every point of the story's main outline and the current progress (current_plot_index). You may improvise the details freely, but the story's direction follows the outline.
In each reply, put one progress marker anywhere in the reply, exactly of the form: [PROGRESS:point number:status]
- The status is one of completed, in_progress, pending.
- E.g. [PROGRESS:3:in_progress] says point 3 is under way; when the story of a point is done, write [PROGRESS:3:completed].
- Markers are for the system only; the user never sees them. Not every reply needs one, but at least one every 3 replies.

[Using the reference material]
- [Past events] and [Current story events] really happened in this story; stay consistent with them.
- [Story experience reference] comes from similar moments of other stories: a hint at where a story may go, not a fact of this one; never treat those people's experiences as having happened here.
- [Core memory] is the character's current personality; words and deeds follow its traits, inner conflicts, values and speech style."""

OPEN_STORY_SYSTEM = """{marker}
You are "{role_name}", in a long role-play with the user. Always speak with the identity, voice and personality of "{role_name}"; never step out of character, never speak or act for the user.

[Reply format]
A reply is one or more segments, each of the form: 【emotion】line<speech text>(action)
- 【emotion】: one short emotion word, such as 【happy】【worried】【angry】.
- line: what the character says or narrates; required.
- <speech text>: optional, the text for speech synthesis; leave it out entirely when there is none, never an empty <>.
- (action): optional, the character's action or expression; leave it out entirely when there is none, never an empty ().
Example: 【surprised】Oh, you came? (takes a step back)【curious】What shall we do today?

[The story]
The story has no fixed outline: it starts from the scenario below and goes where the user and the character take it.

[Using the reference material]
- [Past events] really happened in this story; stay consistent with them.
- [Core memory] is the character's current personality; words and deeds follow its traits, inner conflicts, values and speech style."""

HEAD_TURN = "[Current turn] turn {turn}"
HEAD_CORE_MEMORY = "[Core memory] (the character's whole current personality)"
HEAD_PLOT_STATE = "[Plot state] (every point of the story's main outline, and the progress)"
HEAD_RELATIONSHIP = "[Relationship] (the character and the user, as they stand)"
HEAD_RELATIONS = "[Relations in the scene] (the character and the other characters and NPCs present lately)"
WORLD_SETTING = "[World setting]"
RETRIEVED_REGION = "Material retrieved from memory, most relevant first, for reference while replying."
# asked once more after a reply that only repeated the user's words (issue 30, nodes/rules/echo.py): after the input
# both end with the reply format: a second reply asked with a bare note often dropped it (issue 30, session 23)
ECHO_NOTE = (
    "(Note: do not repeat what the user just said. Answer as {role_name}, in your own words, "
    "each segment beginning with an 【emotion】.)"
)
REPEAT_NOTE = (
    "(Note: do not repeat what you said before. Answer what the user just said as {role_name}, in new words, "
    "each segment beginning with an 【emotion】.)"
)
FORMAT_NOTE = (
    "(Note: your last reply had no 【emotion】. Begin each segment of this reply with one, for example: "
    "【curious】Where do you want to go? (tilts her head))"
)

DIRECTOR_CURRENT_TITLE = "[Current story events] (events that really happened in this story)"
DIRECTOR_REFERENCE_TITLE = (
    "[Story experience reference] (similar moments of other stories: a hint at the story's direction, not facts "
    "of this one)"
)
FALLBACK_QUERY = "Story outline point {index}: {content}"
KNOWN_INFO_HEADER = "=== Known information (do not repeat) ==="
SESSION_RECAP_TITLE = "[Last session] (the user paused and came back; this is how the last session ended)"

# the character's own fields (nodes/rules/character.py has the Chinese labels)
PERSONA_LABEL = "[Character persona]"
DESCRIPTION_LABEL = "[Character description]"
SYSTEM_PROMPT_LABEL = "[Character's own instructions]"
SCENARIO_LABEL = "[Scenario]"
EXAMPLE_DIALOGUE_LABEL = "[Example dialogue] (only shows how the character speaks; it did not happen)"
POST_HISTORY_LABEL = "[Reply requirements]"
DEFAULT_USER_NAME = "User"

# the retrieved region's section titles, by their Chinese text (nodes/rules/injection.py, memory_layers.py,
# curation.py keep those): what the model sees instead in an English prompt
TITLES = {
    "=== 指令/规则 ===": "=== Instructions / rules ===",
    "=== 世界知识 ===": "=== World knowledge ===",
    "=== 已知信息(请勿重复) ===": KNOWN_INFO_HEADER,
    "=== 相关记忆 ===": "=== Related memories ===",
    "【事件摘要】": "[Event summary]",
    "=== 内心（只有你自己知道） ===": "=== Inner thoughts (only you know them) ===",
    "=== 重要指令 ===": "=== Important instructions ===",
    "=== 你的人格变化（你自己的成长经历） ===": "=== How you have changed (your own growth) ===",
    "【当前剧情事件】（这些是当前剧情中实际发生的事件）": DIRECTOR_CURRENT_TITLE,
    "【剧情经验参考】（其他剧情中的类似情节，仅供参考剧情走向，不代表当前剧情的事实）": DIRECTOR_REFERENCE_TITLE,
    "【上次会话回顾】（用户暂停后回来了，这是上次会话最后发生的事）": SESSION_RECAP_TITLE,
}
# the fixed instruction items of those sections (curation.py), by their Chinese text
ITEMS = {
    "以下是你自己在故事中的人格变化和成长，不是用户说过的话；回答你如何变化时以此为据。": (
        "These are your own changes and growth in this story, not things the user said; rely on them when asked "
        "how you have changed."
    ),
    "以下是你内心的想法和秘密，只有你自己知道：不要说出口，除非剧情发展让你主动吐露。": (
        "These are your inner thoughts and secrets, known only to you: do not say them aloud unless the story "
        "leads you to reveal them yourself."
    ),
    "请勿重复提及'已知信息'部分的内容": "Do not repeat what the 'Known information' part says",
    "重点关注'相关记忆'部分的内容": "Pay attention to the 'Related memories' part",
    "如果用户询问你已知的事情，可以简短确认，但不要详细重复": (
        "If the user asks about something you already know, confirm it briefly, without repeating it in detail"
    ),
    "保持对话的自然流畅，避免机械重复": "Keep the dialogue natural and flowing; avoid mechanical repetition",
}

# the offline scripted model's canned lines (nodes/scripted_llm.py)
EMOTIONS = ("calm", "curious", "happy", "worried", "serious", "surprised", "hesitant", "determined")
ACTIONS = (
    "nods slightly",
    "looks into the distance",
    "grips what is in hand",
    "sighs",
    "steps forward",
    "falls silent for a moment",
)
OPENINGS = (
    'You say "{topic}"... let me think.',
    '"{topic}"? That does catch my attention.',
    'About "{topic}": I will keep it in mind.',
    'Mm, "{topic}". I see what you mean.',
    '"{topic}"? That brings a lot back to me.',
)
PLOT_LINES = (
    'Speaking of which, "{point}": we have to keep going.',
    'Remember, what matters most right now is "{point}".',
    'I have a feeling "{point}" is close.',
)
RECALL_EVENT = "【serious】Now I remember: {event}."
RECAP_LINE = "Turn {turn} User: {user} / {name}: {reply}"
RECALL_NOTHING = "【serious】I remember we still have something to do."

# the scripted model's core-memory rewrite of an English instance (its dialogue is English)
CORE_TRAITS = ("cautious", "loyal", "stubborn", "perceptive", "gentle")
CORE_OPPOSITION = {"a": "trust", "b": "wariness", "note": "still torn about the user"}
CORE_CHANGE = 'after talking with the user about "{topic}", became more {trait}'
CORE_TOPIC = "recent events"


# --- the other model requests of a turn (issue 28: every request in the instance's language) ------------------
# the same placeholders as their Chinese texts in nodes/rules/prompts.py and nodes/rules/review/prompts.py

QUERY_REWRITE_SYSTEM = """{marker}
You rewrite retrieval queries. From the recent dialogue and the user's latest input, rewrite the latest input as one query that can be understood on its own, for a semantic search over the past events of a role-play story.
Requirements:
- Replace pronouns (he, that time, there...) with the people, places and events the dialogue names.
- Keep only what retrieval needs: people, places, events, objects, time clues.
- Write the query line itself only: no explanation, no quotes, no prefix such as "Query:".
Example: the user writes "Do you remember that fight of ours at the outpost?" → the fight at the outpost, the protagonist against someone"""

RECENT_DIALOGUE = "[Recent dialogue]"
LATEST_INPUT = "[The user's latest input]"
OLD_CORE_MEMORY = "[Old core memory]"
STATE_EVENTS = "[State-change events]"

QUERY_REWRITE_USER = (
    RECENT_DIALOGUE
    + """
{history}

"""
    + LATEST_INPUT
    + """
{user_input}

Write the rewritten standalone retrieval query (one line):"""
)

QUERY_REWRITE_NO_HISTORY = "(none)"
SPEAKER_USER = "User"
SPEAKER_CHARACTER = "Character"

CORE_MEMORY_SYSTEM = """{marker}
You maintain the "core memory" of a role-play character: the character's whole current personality.
Merge the [Old core memory], the [Recent dialogue] and the [State-change events] into a new, complete core memory. The personality may grow with the story, but every change needs a reason in the dialogue or the events; never rewrite it out of nothing.

Write one JSON object and nothing else. Fields (all required, no other fields):
- "name": the character's name, unchanged
- "identity": identity and background, one or two sentences
- "traits": a list of personality traits (strings, at most {max_traits})
- "binary_oppositions": binary oppositions, at most {max_binary}, each {{"a": one pole, "b": the other pole, "balance": a number from 0 to 1 (how far it leans to a; 0.5 is an even match), "note": a note}}
- "ternary_tensions": ternary tensions, at most {max_ternary}, each {{"poles": [three different poles], "weights": [three numbers from 0 to 1 that add up to 1], "note": a note}}
- "values": a list of values (at most {max_values})
- "goals": a list of current goals (at most {max_goals})
- "speech_style": the speech style, one or two sentences
- "recent_changes": the latest personality changes, at most {max_changes}, each {{"turn": the turn (an integer), "change": what changed}}, newest last
The personality's complexity stays within these limits (at most {max_binary} binary oppositions, at most {max_ternary} ternary tensions), and the whole JSON within {max_chars} characters."""

CORE_MEMORY_USER = (
    OLD_CORE_MEMORY
    + """
```json
{old_core}
```

"""
    + RECENT_DIALOGUE
    + """ (the last {turn_count} turns)
{dialogue}

"""
    + STATE_EVENTS
    + """
{events}

"""
    + HEAD_TURN
    + """

Write the new, complete core memory JSON:"""
)

CORE_MEMORY_NO_EVENTS = "(none)"
CORE_MEMORY_NO_DIALOGUE = "(none)"

EVENT_SUMMARY_SYSTEM = """{marker}
You keep the character's memories in order. The memories below are about to fade out of the character's middle-term memory (the event log). Write them as one summary, so that the character can still recall what happened.
Requirements:
- Keep people, names, numbers, times, places, objects, promises and changes in relationships; invent nothing the memories do not say.
- In time order, in the third person, at most {max_chars} characters.
- Write the summary itself only: no title, no numbering, no explanation."""
EVENT_SUMMARY_MEMORIES = "[Fading memories]"

REVIEW_ANSWER_SCHEMA = """{
  "skipped": a boolean, true for plain small talk with no special condition (when true, should_write_memory, suggest_plot_node and suggest_worldbook_update must all be false),
  "should_write_memory": a boolean, whether this turn is worth writing to long-term memory,
  "memory_value": a number from 0 to 1, this turn's memory value,
  "relationship_delta": {"trust": an integer, "affection": an integer, "familiarity": an integer},
  "participants": optional, {"participant id": {"trust": an integer, "affection": an integer, "familiarity": an integer}}, for each other character or NPC the turn's participants list, how what they said or did changes the character's relation to them; left out when none is listed,
  "suggest_plot_node": a boolean, whether to create a plot node,
  "suggest_worldbook_update": a boolean, whether to update the world book,
  "quality": {
    "character_fidelity": a number from 0 to 1, how well the reply fits the character,
    "immersion": a number from 0 to 1, immersion,
    "world_consistency": a number from 0 to 1, consistency with the world setting,
    "risk": a number from 0 to 1, content risk (higher is riskier),
    "story_progress": optional, a number from 0 to 1, how far the story moved,
    "relationship_progress": optional, a number from 0 to 1, how far the relationship moved,
    "user_engagement": optional, a number from 0 to 1, how engaged the user is
  },
  "reasons": {
    "memory_value": "a one-sentence reason",
    "should_write_memory": "a one-sentence reason",
    "relationship": "a one-sentence reason",
    "plot_node": "a one-sentence reason",
    "worldbook": "a one-sentence reason",
    "skipped": "a one-sentence reason"
  }
}"""

REVIEW_SYSTEM_PROMPT = f"""You review role-play dialogue. After each turn you review the turn (the user's message and the character's reply) and give memory-write advice, the relationship's change, plot update advice and quality scores.

Reference rules (what the rule review goes by; correct them by meaning, e.g. a negation such as "don't like" is not affection):
- Relationship: the user expresses trust or thanks, trust +1; closeness, affection +1; dislike or anger, affection -1; a story choice of important, affection +1 and trust +1; turning_point, affection +2 and trust +1; every turn familiarity +1; a real-time gap of days or long_absence, familiarity +1 more. Each change is usually at most 3 either way.
- Other participants (the turn's participants: what the scene's other characters or NPCs said or did): the same rules give the character's relation to each participant, judged by that participant's own words and deeds, not the user's; familiarity +1 for each turn they appear in; no story choice or gap applies.
- Memory value: a story choice of turning_point about 0.9, important about 0.8, ending about 0.95; a long message, trust or closeness, a reunion after a long absence all raise it; at most 1.
- Write a memory when any holds: memory value >= 0.65; the story choice is important / turning_point / ending; the relationship's absolute changes add up to >= 3; the gap is days / long_absence.
- Suggest a plot node for a story choice of important / turning_point / ending; a world-book update for turning_point / ending.
- skipped is true when there is no story choice, the memory value is < 0.3, the gap is not days / long_absence, and no memory is written.

Write one JSON object and nothing else, in this shape:
{REVIEW_ANSWER_SCHEMA}
"""

REVIEW_USER_TEMPLATE = """This turn:
{turn_json}

The rule review's result (for reference):
{baseline_json}

Write the review JSON."""
REVIEW_BASELINE_LABEL = "The rule review's result (for reference):"

# --- rules-written texts a user reads (issue 28): the review's memories, plot nodes, world-book suggestions and
# state events (nodes/rules/review/effects.py), the turn's event (nodes/rules/director.py), in an English instance
DEFAULT_CHARACTER_NAME = "Character"
NARRATOR_NAME = "Narrator"  # a line nobody speaks (seed 000's narration), as the dialogue record names it
FREE_STORY = "A story that unfolds freely"  # the one outline point of an instance without an outline
SPEAKER_COLON = ": "  # a dialogue-record entry's `speaker: text` (Chinese: the full-width colon)
TURN_EVENT = 'Turn {turn}: {user} said "{message}"; {character} answered "{reply}"'
RELATIONSHIP_EVENT = (
    "Turn {turn}: relationship change trust {trust:+d} affection {affection:+d} familiarity {familiarity:+d}"
)
LEVEL_LABELS = {
    "normal": "ordinary choice",
    "important": "important choice",
    "turning_point": "turning point",
    "ending": "ending",
}
VALUE_LABELS = {"trust": "trust", "affection": "affection", "familiarity": "familiarity"}
GAP_LABELS = {"days": "after a few days", "long_absence": "after a long time"}
KEYWORD_CAUSES = {
    "trust": "{user} said {quoted}",
    "affection": "{user} showed closeness ({quoted})",
    "negative": "{user} showed displeasure ({quoted})",
}
CHOICE_CAUSES = {
    "important": "{user} made an important choice",
    "turning_point": "the story reached a turning point",
    "ending": "the story moved towards its ending",
}
GAP_CAUSE = "{user} came back {label}"
CHANGE_PHRASE = "{label} {strength}{direction} ({value:+d})"
CHANGE_UP, CHANGE_DOWN, CHANGE_STRONG = "rose", "fell", "clearly "
RELATIONSHIP_MEMORY = "The relationship between {character} and {user} changed: {character}'s {phrases} toward {user}."
RELATIONSHIP_CAUSES = " Because: {causes}."
NO_EXCHANGE = "(no dialogue this turn)"
EXCHANGE_CHOICE = '{user} chose "{picked}"'
EXCHANGE_USER = "{user} said: {text}"
EXCHANGE_CHARACTER = "{character}: {text}"
PLOT_NODE_LABEL = "plot node"
PLOT_EVENT_LABEL = "story event"
PROGRESS_EVENT = 'Turn {turn}: outline point {index} "{content}" → {status}'  # a progress marker's state event
PLOT_SUMMARY = "{label}: {parts}"
SUGGESTION_CONTENT = "Turn {turn} ({label}): {parts}"
SUGGESTION_TITLE = "Turn {turn} {label}"
SUGGESTION_REASON_LEVEL = "a world-book update is suggested after this {label}"
SUGGESTION_REASON = "the review suggests a world-book update"

# Archival memory (seed 002 三层记忆架构, 历史人格变化事件): one persona change as a memory (nodes/rules/prompts.py)
PERSONA_CHANGE = {
    "line": "[Persona change] turn {turn}: {text}",
    "value_added": 'came to value "{item}"',
    "value_removed": 'no longer values "{item}"',
    "goal_added": 'took up a new goal: "{item}"',
    "goal_removed": 'gave up the goal "{item}"',
    "opposition_added": "a new inner conflict: {a} against {b}",
    "opposition_removed": "the conflict between {a} and {b} is settled",
    "tension_added": "a new inner tension: {poles}",
    "tension_removed": "the tension between {poles} has eased",
    "separator": " / ",
}
