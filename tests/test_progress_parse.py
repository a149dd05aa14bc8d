"""Progress markers → plot state (seed 002 需求1 动态引导) and the reply parser (seed 000 reply format)."""

from __future__ import annotations

import copy
import random
import re

import pytest
from personalab.nodes.rules.memory_builder import format_own_line
from personalab.nodes.rules.plot import apply_progress, extract_progress, new_plot_state
from personalab.nodes.rules.reply import format_reply, parse_reply

OUTLINE = ["发现背叛者的线索", "潜入敌人据点", "与仇人对峙", "做出关键选择", "应对选择的后果"]


def plot_at(statuses: str, current: int, last: int = 0) -> dict:
    """A plot state from a status string: c = completed, i = in_progress, p = pending."""
    names = {"c": "completed", "i": "in_progress", "p": "pending"}
    outline = [{"index": n, "content": OUTLINE[n - 1], "status": names[s]} for n, s in enumerate(statuses, start=1)]
    return {"story_outline": outline, "current_plot_index": current, "last_progress_turn": last}


def statuses(plot: dict) -> str:
    return "".join(p["status"][0] for p in plot["story_outline"])


# --- extract_progress ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("[PROGRESS:3:in_progress]你的枪口对准了他。", "你的枪口对准了他。"),
        ("你的枪口对准了他 [PROGRESS:3:in_progress] 他眼中闪过一丝恐惧", "你的枪口对准了他 他眼中闪过一丝恐惧"),
        (
            "“你的枪口对准了他，他眼中闪过一丝恐惧...” [PROGRESS:3:in_progress]",
            "“你的枪口对准了他，他眼中闪过一丝恐惧...”",
        ),
    ],
)
def test_a_marker_anywhere_is_found_and_removed(text: str, clean: str) -> None:
    assert extract_progress(text, 10) == (clean, [{"index": 3, "status": "in_progress"}], [])


def test_several_markers_come_in_order() -> None:
    text = "【开心】终于找到了！[PROGRESS:1:completed]【认真】走吧。[PROGRESS:2:in_progress]"
    clean, markers, ignored = extract_progress(text, 10)
    assert clean == "【开心】终于找到了！【认真】走吧。"
    assert markers == [{"index": 1, "status": "completed"}, {"index": 2, "status": "in_progress"}]
    assert ignored == []


@pytest.mark.parametrize(
    ("marker", "index", "status"),
    [
        ("［PROGRESS：3：in_progress］", 3, "in_progress"),
        ("【PROGRESS:3:completed】", 3, "completed"),
        ("[ progress : 3 : In-Progress ]", 3, "in_progress"),
        ("[PROGRESS:3:in progress]", 3, "in_progress"),
        ("[PROGRESS:３:pending]", 3, "pending"),
        ("[PROGRESS:2:已完成]", 2, "completed"),
        ("[PROGRESS:2:进行中]", 2, "in_progress"),
        ("[PROGRESS:2:待进行]", 2, "pending"),
    ],
)
def test_tolerated_spellings(marker: str, index: int, status: str) -> None:
    assert extract_progress(f"他点了点头。{marker}", 10) == ("他点了点头。", [{"index": index, "status": status}], [])


@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        ("[PROGRESS:0:completed]", "index 0 outside the outline (1..10)"),
        ("[PROGRESS:11:completed]", "index 11 outside the outline (1..10)"),
        ("[PROGRESS:3:finished]", "unknown status 'finished'"),
        ("[PROGRESS:3]", "not of the form"),
        ("[PROGRESS]", "not of the form"),
    ],
)
def test_an_unusable_marker_is_removed_and_reported(marker: str, reason: str) -> None:
    clean, markers, ignored = extract_progress(f"他点了点头。{marker}[PROGRESS:4:pending]", 10)
    assert clean == "他点了点头。"
    assert markers == [{"index": 4, "status": "pending"}]
    assert len(ignored) == 1 and ignored[0]["raw"] == marker and reason in ignored[0]["reason"]


def test_text_without_markers_is_kept() -> None:
    text = "【平静】[注意] 这不是标记(PROGRESS)。"
    assert extract_progress(f"  {text}\n", 10) == (text, [], [])


def test_a_negative_outline_size_is_an_error() -> None:
    with pytest.raises(ValueError, match="outline_size"):
        extract_progress("x", -1)


# --- new_plot_state / apply_progress ---------------------------------------------------------------------------


def test_a_new_plot_state_starts_at_point_one() -> None:
    plot = new_plot_state(OUTLINE)
    assert plot == plot_at("ipppp", 1, 0)


@pytest.mark.parametrize("outline", [[], ["发现线索", "  "], "发现线索"])
def test_a_new_plot_state_needs_points(outline: list[str] | str) -> None:
    with pytest.raises(ValueError, match="outline"):
        new_plot_state(outline)


def test_no_marker_keeps_the_state() -> None:
    plot = plot_at("cippp", 2, 4)
    assert apply_progress(plot, [], 9) == plot


def test_in_progress_moves_to_the_highest_point_so_marked() -> None:
    plot = apply_progress(
        plot_at("cippp", 2), [{"index": 3, "status": "in_progress"}, {"index": 4, "status": "in_progress"}], 5
    )
    assert (statuses(plot), plot["current_plot_index"], plot["last_progress_turn"]) == ("ciiip", 4, 5)


def test_completing_the_current_point_moves_to_the_next_open_one() -> None:
    plot = apply_progress(plot_at("cippp", 2), [{"index": 2, "status": "completed"}], 6)
    assert (statuses(plot), plot["current_plot_index"]) == ("ccipp", 3)


def test_completing_skips_points_already_completed() -> None:
    plot = apply_progress(
        plot_at("cipcp", 2), [{"index": 2, "status": "completed"}, {"index": 3, "status": "completed"}], 6
    )
    assert (statuses(plot), plot["current_plot_index"]) == ("cccci", 5)


def test_completing_another_point_leaves_the_current_one() -> None:
    plot = apply_progress(plot_at("cippp", 2), [{"index": 4, "status": "completed"}], 6)
    assert (statuses(plot), plot["current_plot_index"]) == ("cipcp", 2)


def test_completing_the_last_point_ends_the_outline_there() -> None:
    plot = apply_progress(plot_at("cccci", 5), [{"index": 5, "status": "completed"}], 30)
    assert (statuses(plot), plot["current_plot_index"]) == ("ccccc", 5)


def test_a_marker_that_changes_nothing_still_records_the_turn() -> None:
    plot = apply_progress(plot_at("cippp", 2, 3), [{"index": 2, "status": "in_progress"}], 8)
    assert plot == plot_at("cippp", 2, 8)


def test_apply_progress_does_not_change_its_input() -> None:
    plot = plot_at("cippp", 2)
    before = copy.deepcopy(plot)
    apply_progress(plot, [{"index": 2, "status": "completed"}], 3)
    assert plot == before


@pytest.mark.parametrize(
    "marker", [{"index": 6, "status": "completed"}, {"index": 2, "status": "done"}, {"index": "2", "status": "pending"}]
)
def test_a_bad_marker_is_an_error(marker: dict) -> None:
    with pytest.raises(ValueError, match="marker"):
        apply_progress(plot_at("cippp", 2), [marker], 3)


@pytest.mark.parametrize(
    ("plot", "message"),
    [
        ({"story_outline": [], "current_plot_index": 1}, "story_outline"),
        (plot_at("cippp", 9), "current_plot_index"),
        ({**plot_at("cippp", 2), "story_outline": [{"index": 1, "content": "x", "status": "?"}]}, "unknown status"),
    ],
)
def test_a_bad_plot_state_is_an_error(plot: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_progress(plot, [], 1)


# --- parse_reply ----------------------------------------------------------------------------------------------


def seg(emotion: str | None, content: str, tts: str | None = None, action: str | None = None) -> dict:
    return {"original_emotion": emotion, "content": content, "tts_content": tts, "action_content": action}


def test_the_seed_example_reply_parses_into_its_lines() -> None:
    text = (
        "【无奈】呜呜,我还没写完呢...<うう、まだ書き終わってないの...>(轻轻地叹了口气)"
        "【调皮】那个,你的作业给我看看怎么样呀?<あの、あなたの宿題を見てどうですか?>"
    )
    assert parse_reply(text) == [
        seg("无奈", "呜呜,我还没写完呢...", "うう、まだ書き終わってないの...", "轻轻地叹了口气"),
        seg("调皮", "那个,你的作业给我看看怎么样呀?", "あの、あなたの宿題を見てどうですか?"),
    ]


@pytest.mark.parametrize(
    ("text", "segments"),
    [
        ("今天天气不错。", [seg(None, "今天天气不错。")]),
        ("今天天气不错(伸了个懒腰)", [seg(None, "今天天气不错", action="伸了个懒腰")]),
        ("嗯……【开心】你来啦", [seg(None, "嗯……"), seg("开心", "你来啦")]),
        ("【开心】你来啦（摇尾巴）", [seg("开心", "你来啦", action="摇尾巴")]),
        ("【开心】你来啦(看着他(笑))", [seg("开心", "你来啦", action="看着他(笑)")]),
        ("【开心】(摇尾巴)", [seg("开心", "(摇尾巴)")]),
        ("【开心】【难过】唉", [seg("难过", "唉")]),
        ("【开心】 你来啦 \n【好奇】 在做什么？ ", [seg("开心", "你来啦"), seg("好奇", "在做什么？")]),
        ("【开心】你来啦<>()", [seg("开心", "你来啦")]),
        ("a【b", [seg(None, "a【b")]),
        ("【】你来啦", [seg(None, "【】你来啦")]),
        ("【 】你来啦", [seg(None, "【 】你来啦")]),
        ("【 开心 】你来啦", [seg("开心", "你来啦")]),
        ("", []),
        ("  \n ", []),
    ],
)
def test_parse_reply_cases(text: str, segments: list[dict]) -> None:
    assert parse_reply(text) == segments


def test_a_reply_of_clean_segments_round_trips_exactly() -> None:
    text = "【开心】你来啦<いらっしゃい>(摇尾巴)【好奇】在做什么？(歪头)"
    assert "".join(format_own_line(**_args(s)) for s in parse_reply(text)) == text


def _args(segment: dict) -> dict:
    return {
        "emotion": segment["original_emotion"],
        "content": segment["content"],
        "tts": segment["tts_content"],
        "action": segment["action_content"],
    }


SAFE = "你好呀今天天气不错我们走吧莱姆钦灵abcXYZ123，。！？…~"
EMOTIONS = ["开心", "难过", "惊讶", "好奇", "无奈", "害羞"]


def _word(rng: random.Random, low: int = 1, high: int = 12) -> str:
    return "".join(rng.choice(SAFE) for _ in range(rng.randint(low, high)))


def test_random_segments_survive_format_then_parse() -> None:
    rng = random.Random(2025)
    for _ in range(2000):
        segments = []
        for number in range(rng.randint(1, 5)):
            emotion = rng.choice(EMOTIONS) if number or rng.random() < 0.8 else None
            tts = _word(rng) if rng.random() < 0.5 else None
            action = _word(rng) if rng.random() < 0.5 else None
            segments.append(seg(emotion, _word(rng), tts, action))
        text = format_reply(segments)
        assert parse_reply(text) == segments, text


TOKENS = [
    *("【开心】", "【难过】", "【 悲 】", "【 】", "【】", "你好", "呀", "a", " ", "\n", "\t"),
    *("(笑)", "（笑）", "<tts>", "( )", "< >", "(", ")", "（", "）", "<", ">", "【", "】", "【x", "y】"),
]
_EMPTY_SEGMENT = re.compile(r"【[^【】\n]+】(?=【[^【】\n]+】|$)")


def _normal(text: str) -> bool:
    """No normalisation applies to this text: no whitespace, full-width parentheses, empty groups or segments."""
    return not (re.search(r"\s|（|）|\(\)|<>", text) or _EMPTY_SEGMENT.search(text))


def test_random_texts_survive_parse_then_format() -> None:
    rng = random.Random(7)
    exact = 0
    for _ in range(5000):
        text = "".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 12)))
        segments = parse_reply(text)
        again = format_reply(segments)
        assert parse_reply(again) == segments, text  # normalising twice changes nothing
        assert all(s["content"] for s in segments)  # every segment can be stored as a line
        if _normal(text):
            exact += 1
            assert again == text, text
    assert exact > 500


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # the issue-30 reply of a 1.5B model: the template's field names copied after the real action
        ("【开心】好啊，走吧。(往后退了一步)‹语音文本>(动作)", [("开心", "好啊，走吧。", None, "往后退了一步")]),
        (
            "【惊讶】哇<语音文本>（动作）【好奇】今天想做什么呢？",
            [("惊讶", "哇", None, None), ("好奇", "今天想做什么呢？", None, None)],
        ),
        ("【情绪】台词<语音文本>(动作)【开心】嗯。", [("开心", "嗯。", None, None)]),
        ("【happy】Hi there.<tts text>(action)", [("happy", "Hi there.", None, None)]),
        ("【开心】好的<hǎo de>(点头)", [("开心", "好的", "hǎo de", "点头")]),  # real fields stay
    ],
)
def test_the_formats_own_placeholders_never_reach_a_stored_line(reply: str, expected: list[tuple]) -> None:
    segments = parse_reply(reply)
    assert [(s["original_emotion"], s["content"], s["tts_content"], s["action_content"]) for s in segments] == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        # the session-14 replies of the 1.5B model: the memory block's time copied where the format puts the action
        ("【疑惑】我最害怕的是深水。(57 轮前，18 分钟前)", [("疑惑", "我最害怕的是深水。", None, None)]),
        ("【平静】好。（停顿）（3 轮前）", [("平静", "好。", None, "停顿")]),  # the real action before it stays
        ("【calm】Sure. (2 turns ago, 5 minutes ago)", [("calm", "Sure.", None, None)]),
        ("【平静】好<hǎo>(本轮)【开心】嗯。", [("平静", "好", "hǎo", None), ("开心", "嗯。", None, None)]),
        ("【平静】(3 轮前)【开心】嗯。", [("开心", "嗯。", None, None)]),  # nothing else: no line
        ("【开心】三天后见(3 天后)", [("开心", "三天后见", None, "3 天后")]),  # not the block's text: an action
    ],
)
def test_a_memorys_time_copied_from_the_memory_block_never_reaches_a_stored_line(
    reply: str, expected: list[tuple]
) -> None:
    segments = parse_reply(reply)
    assert [(s["original_emotion"], s["content"], s["tts_content"], s["action_content"]) for s in segments] == expected


@pytest.mark.parametrize("language", ["zh", "en"])
def test_every_time_the_memory_block_writes_is_recognised(language: str) -> None:
    """The pattern follows `injection.time_ago`'s texts: every turn count and age it writes is dropped."""
    from personalab.nodes.rules.injection import time_ago

    for turns in (None, 0, 1, 2, 57, 1200):
        for seconds in (None, 59, 60, 3600 * 5, 86400 * 3, 86400 * 40, 86400 * 800):
            ago = time_ago(turns, seconds, language)
            if not ago:
                continue
            segments = parse_reply(f"【平静】好。({ago})")
            assert [(s["content"], s["action_content"]) for s in segments] == [("好。", None)], ago
