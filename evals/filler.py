"""The built-in pool of everyday lines for a scenario's filler turns (`{"filler": 200, "seed": 7}`): ordinary
small talk that carries no fact a probe asks about, so a probe after 200 filler turns tests long-term memory,
not the recent-dialogue window. Deterministic: the same count, seed and language give the same lines."""

from __future__ import annotations

import random

_ZH_OPENERS = ("", "嗯，", "对了，", "说起来，", "唉，", "哈哈，", "其实，", "话说，")
_ZH_LINES = (
    "今天的风有点大。",
    "天色暗下来了，我们歇一会儿吧。",
    "我有点困了。",
    "你觉得明天会下雨吗？",
    "这条路好像比昨天的难走。",
    "刚才那阵声音是什么？",
    "先喝口水再说。",
    "我的鞋子又磨破了。",
    "远处好像有灯光。",
    "你今天话好少啊。",
    "我们走了多久了？",
    "这里的空气闻起来怪怪的。",
    "休息够了就继续走吧。",
    "你看那边的云，像不像一只狗？",
    "今晚的星星真多。",
    "我刚才差点摔了一跤。",
    "背包越来越沉了。",
    "你冷不冷？",
    "随便聊聊吧，路上太安静了。",
    "我想起小时候常走这样的路。",
    "这地方以前应该很热闹。",
    "别担心，我没事。",
    "你听，是不是有鸟叫？",
    "等会儿找个地方坐下吧。",
    "手有点冻僵了。",
    "你笑起来挺好看的。",
    "我们换条路走怎么样？",
    "这墙上的字已经看不清了。",
    "慢一点，我跟不上了。",
    "今天总算没出什么事。",
    "你说时间过得快不快？",
    "我刚刚在发呆。",
    "把灯调暗一点吧。",
    "这里的地图好像不太准。",
    "肚子咕咕叫了。",
    "你会不会觉得无聊？",
    "风停了，安静得有点吓人。",
    "这台阶好陡。",
    "我数了数，一共三十二级。",
    "要不要先把东西放下？",
)
_ZH_CLOSERS = ("", "", "你说呢？", "我随口说说。", "没什么别的意思。", "……")

_EN_OPENERS = ("", "Hmm, ", "By the way, ", "Honestly, ", "Well, ", "So, ")
_EN_LINES = (
    "the wind is picking up.",
    "it's getting dark, let's rest a bit.",
    "I'm a little sleepy.",
    "do you think it will rain tomorrow?",
    "this road feels longer than yesterday's.",
    "what was that noise just now?",
    "let's have some water first.",
    "my boots are wearing thin again.",
    "there seems to be a light in the distance.",
    "you're quiet today.",
    "how long have we been walking?",
    "the air smells strange here.",
    "look at that cloud, it looks like a dog.",
    "so many stars tonight.",
    "I nearly tripped back there.",
    "my backpack keeps getting heavier.",
    "are you cold?",
    "let's just chat, the road is too quiet.",
    "this place must have been busy once.",
    "don't worry, I'm fine.",
    "listen, is that a bird?",
    "my hands are freezing.",
    "shall we take another way?",
    "slow down, I can't keep up.",
    "nothing went wrong today, at least.",
    "I was daydreaming just now.",
    "these stairs are steep.",
    "do you ever get bored?",
)
_EN_CLOSERS = ("", "", " What do you think?", " Just saying.", "")


def filler_lines(count: int, seed: int = 0, language: str = "zh") -> list[str]:
    """`count` everyday lines in `language` ("zh" or "en"), the same for the same arguments."""
    rng = random.Random(f"{language}:{seed}")
    if language == "en":
        lines = []
        for _ in range(count):
            opener, body, closer = rng.choice(_EN_OPENERS), rng.choice(_EN_LINES), rng.choice(_EN_CLOSERS)
            lines.append((opener + body if opener else body[0].upper() + body[1:]) + closer)
        return lines
    return [rng.choice(_ZH_OPENERS) + rng.choice(_ZH_LINES) + rng.choice(_ZH_CLOSERS) for _ in range(count)]
