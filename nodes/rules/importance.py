"""How much a line of dialogue is worth remembering as a fact (issue 11: "what matters is kept").

Seed 003's memory-value table (`nodes.rules.review.rules`) scores a turn by its choice level, the length of the
user's message, trust / affection keywords and the real-time gap. A plain fact — "我妹妹今年十二岁", "I moved to
Boston last May" — gets nothing from it, gets importance 0.1 as a turn memory, and fades out of the layers
(seed 001 低重要性记忆会逐渐衰减并被删除). Seed 001 `CalculateInitialImportance` says importance is
"根据…评估" without saying how; this module is that estimate for facts. The review's value stays as seed 003
defines it; the estimate only raises a memory's importance where the table gives less
(`importance = max(table value, estimate)`).

Signals (Chinese first, then English; each counts once per line, weights in `SIGNAL_WEIGHTS`):

- ``name``: naming someone or something (我叫…, 名字是, 姓…, 外号; my name is, called, named);
- ``number``: a number with a unit or a count (十二岁, 3个, 两只, 500块, 1.8米; digits; twelve years old);
- ``date``: a concrete time (生日, 3月5日, 周六, 明年, 下个月, 去年; Monday, May, birthday, next week) — not
  今天 / 现在 / 刚才 alone, which date nothing worth keeping;
- ``place``: where someone lives, works, comes from, or a named kind of place (住在, 老家, 来自, 在…上班,
  …市 / 省 / 公园 / 学校; live in, from, work at, moved to);
- ``possession``: what someone has or keeps (我有, 养了, 买了, 我的 + a thing; I have, I own, my + noun);
- ``relation``: family and close people (妹妹, 妈妈, 男朋友, 同事; sister, mom, boyfriend);
- ``promise``: a promise or plan (答应, 保证, 一定会, 约好, 打算, 准备; promise, I will, going to, plan to);
- ``preference``: likes, dislikes, fears, allergies, jobs (喜欢, 讨厌, 过敏, 害怕, 是…老师; love, hate,
  allergic, favorite, I work as);
- ``activity``: what someone does or did (在学, 开始学, 申请了, 参加了, 通常…来放松; I started, I built, I
  usually, I've been);
- ``first_person``: the user speaks about themself (我 / 我们 / my / I) — a small bonus, only with another signal.

The estimate: no signal but ``first_person`` → 0 (small talk: nothing to raise); otherwise
``min(MAX_IMPORTANCE, BASE + Σ weights)``. A question (a clause that ends with ？/ ? / 吗 / 呢, or asks 什么 /
几 / 哪 / what / when …) tells no fact of its own: a signal found only in question clauses counts half. A line is counted as a fact when the estimate reaches
`FACT_THRESHOLD` (0.6: seed 001's archive threshold, so a fact memory can reach the archive instead of fading).

Measured on held-out sentences (not used to write these rules; `tests/test_importance.py` prints precision and
recall): see docs/architecture.md (Fact importance).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BASE = 0.45
MAX_IMPORTANCE = 0.9
FACT_THRESHOLD = 0.6
QUESTION_FACTOR = 0.5

SIGNAL_WEIGHTS: dict[str, float] = {
    "name": 0.3,
    "number": 0.2,
    "date": 0.2,
    "place": 0.2,
    "possession": 0.15,
    "relation": 0.2,
    "promise": 0.3,
    "preference": 0.15,
    "activity": 0.15,
    "first_person": 0.05,
}

_CN_NUM = "零一二两三四五六七八九十百千万半几"
_UNITS = (
    "岁|年级|年|个月|月|号|日|天|周|星期|小时|分钟|点钟|点|个|只|条|本|张|件|套|辆|台|部|家|口|位|次|遍|"
    "块|元|万|千|米|公里|斤|公斤|克|层|楼|室|栋|届|级|分|度|倍|首|双|瓶|杯|碗"
)

_PATTERNS: dict[str, re.Pattern[str]] = {
    "name": re.compile(
        r"我叫|叫做|名叫|名字|我是[\u4e00-\u9fff]{2,3}(?=[，,。.!！\s]|$)|姓[\u4e00-\u9fff]|外号|昵称|小名|网名|称呼|"
        r"\bmy name\b|\bname is\b|\bname's\b|\bnamed\b|\bcalled\b|(?-i:\bI'?m [A-Z][a-z]+)",
        re.IGNORECASE,
    ),
    "number": re.compile(
        # a lone 一 before a classifier is an article (一部电影, 一个问题), not a count: only with an age or span
        rf"\d|(?!十分)[{_CN_NUM}]*[零两三四五六七八九十百千万半][{_CN_NUM}]*(?:{_UNITS})|一(?:岁|周岁|年|个月|辈子)|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
        r"twenty|thirty|forty|fifty|hundred|thousand)\b",
        re.IGNORECASE,
    ),
    "date": re.compile(
        r"生日|纪念日|节日|春节|国庆|中秋|圣诞|周[一二三四五六日末]|星期[一二三四五六日天]|礼拜|"
        r"[上下]个?(?:月|周|星期|礼拜)|明年|去年|今年|前年|后年|明天|后天|下次|月底|月初|年底|寒假|暑假|假期|"
        r"[\d一二三四五六七八九十]+月[\d一二三四五六七八九十]*[日号]?|"
        r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|january|february|march|april|"
        r"june|july|august|september|october|november|december|birthday|anniversary|tomorrow|yesterday|"
        r"next (?:week|month|year)|last (?:week|month|year|night)|this (?:weekend|summer|winter))\b|\bin 19\d\d|"
        r"\bin 20\d\d",
        re.IGNORECASE,
    ),
    "place": re.compile(
        r"住在|住的|搬到|搬去|搬家|老家|家乡|故乡|来自|出生在|在[\u4e00-\u9fff]{1,8}(?:上班|工作|上学|读书|长大)|"
        r"[\u4e00-\u9fff](?:市|省|县|镇|村|区|街|路|公园|学校|大学|中学|小学|医院|公司|餐厅|饭店|超市|商场|"
        r"广场|机场|车站|酒店|图书馆|博物馆|咖啡馆|书店)|北京|上海|广州|深圳|杭州|成都|"
        r"\b(?:live[sd]? in|living in|moved to|from|born in|grew up in|work(?:s|ed)? at|study at|"
        r"city|town|school|university|college|hospital|office|park|beach|museum)\b",
        re.IGNORECASE,
    ),
    "possession": re.compile(
        # 我的 + a noun is not enough (我的情感问题, 我的心情): only having, keeping, buying, getting
        r"我(?:们)?(?:家)?(?:有(?!点|些|一点|时|没有)|养了?|买了|拥有|收到|得到)|养了|买了|送了|送给|收藏|"
        r"\bi (?:have|own|got|bought|adopted)\b|\bmy (?:car|house|home|dog|cat|pet|apartment|bike)\b",
        re.IGNORECASE,
    ),
    "relation": re.compile(
        r"妹妹|姐姐|哥哥|弟弟|妈妈|母亲|爸爸|父亲|爷爷|奶奶|外公|外婆|姥姥|姥爷|儿子|女儿|孩子|老公|老婆|丈夫|妻子|"
        r"男朋友|女朋友|对象|未婚|闺蜜|同事|老板|室友|同学|邻居|表[哥姐弟妹]|堂[哥姐弟妹]|叔叔|阿姨|舅舅|家人|宠物|"
        r"\b(?:sister|brother|mom|mother|dad|father|son|daughter|kids?|children|husband|wife|boyfriend|girlfriend|"
        r"partner|grandma|grandpa|grandmother|grandfather|cousin|aunt|uncle|colleague|boss|roommate|neighbou?r|"
        r"family|dog|cat|puppy)\b",
        re.IGNORECASE,
    ),
    "promise": re.compile(
        r"答应|保证|发誓|承诺|约定|约好|说好|一定会|一定要|不会忘|记住了|打算|准备|计划(?:去|要|在|明|下|今)|决定|将来|以后要|"
        r"\b(?:promise[sd]?|swear|i will|i'll|going to|gonna|plan(?:ning)? to|decided to|intend)\b",
        re.IGNORECASE,
    ),
    "preference": re.compile(
        r"喜欢|最爱|爱吃|爱喝|爱好|兴趣|讨厌|不爱|受不了|过敏|害怕|怕[\u4e00-\u9fff]|梦想|愿望|擅长|习惯|"
        r"(?:我|他|她)是(?:一名|一个|个)?[\u4e00-\u9fff]{0,4}(?:老师|医生|学生|护士|工程师|程序员|律师|设计师|厨师|"
        r"警察|司机|作家|画家|歌手|演员|会计|销售)|职业|专业|"
        r"\b(?:love|hate|like|enjoy|favou?rite|allergic|afraid|scared|hobby|passion|dream|i work as|i'?m an?)\b",
        re.IGNORECASE,
    ),
    "activity": re.compile(
        r"我(?:最近|现在|一直|每天|每周|平时|通常|经常|常常|也|还)*(?:在学|开始学|学会了|在写|正在|申请了|报名|参加了|"
        r"加入了|完成了|做了|搬|换了|辞职|毕业|考上|考了|退休|结婚|离婚|怀孕|生病|住院)|"
        r"(?:通常|经常|每天|每周|平时|一般)(?:会|都)?[\u4e00-\u9fff]{1,10}(?:来放松|锻炼|跑步|健身)|"
        r"\bi (?:started|built|made|finished|joined|signed up|applied|graduated|moved|usually|always|"
        r"had to|used to|work|study|teach|volunteer|run|play)\b|\bi'?ve been\b",
        re.IGNORECASE,
    ),
    "first_person": re.compile(r"我|\b(?:i|my|me|we|our|i'm|i've)\b", re.IGNORECASE),
}

_QUESTION = re.compile(
    r"[？?]\s*$|[吗呢吧]\s*[。！!]?\s*$|什么|几[岁个点号]|哪[里儿个天些]|谁|怎么|为什么|多少|"
    r"^\s*(?:what|when|where|who|why|how|do|does|did|is|are|can|could|would|will)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ImportanceEstimate:
    """The estimate for one line: `importance` in [0, MAX_IMPORTANCE] (0: nothing to raise), the signals
    found, and whether the line reads as a question."""

    importance: float
    signals: tuple[str, ...]
    question: bool

    @property
    def is_fact(self) -> bool:
        return self.importance >= FACT_THRESHOLD

    def reason(self) -> str:
        if not self.importance:
            return "no fact signal (0)"
        listed = " + ".join(f"{name} {SIGNAL_WEIGHTS[name]:g}" for name in self.signals)
        asked = " (signals in questions count half)" if self.question else ""
        return f"{BASE:g} + {listed} = {self.importance:g}{asked}"


def fact_signals(text: str) -> tuple[str, ...]:
    """The signals (`SIGNAL_WEIGHTS` names, in that order) found in `text`."""
    return tuple(name for name, pattern in _PATTERNS.items() if pattern.search(text))


_CLAUSE = re.compile(r"[^，,。！？!?；;\n]+[，,。！？!?；;\n]*")


def estimate_importance(text: str) -> ImportanceEstimate:
    """The fact-importance estimate of one line (module docstring). Questions are judged clause by clause
    (split at ，。！？；): "我比较喜欢自然风光，你有推荐的地方吗？" tells its fact in a clause that asks nothing."""
    if not isinstance(text, str) or not text.strip():
        return ImportanceEstimate(0.0, (), False)
    stated: set[str] = set()
    asked: set[str] = set()
    for clause in _CLAUSE.findall(text.strip()) or [text.strip()]:
        found = fact_signals(clause)
        (asked if _QUESTION.search(clause.strip()) else stated).update(found)
    signals = tuple(name for name in SIGNAL_WEIGHTS if name in stated or name in asked)
    question = bool(asked) and not (stated - {"first_person"})
    if not [s for s in signals if s != "first_person"]:
        return ImportanceEstimate(0.0, signals, question)
    total = sum(SIGNAL_WEIGHTS[name] * (1.0 if name in stated else QUESTION_FACTOR) for name in signals)
    return ImportanceEstimate(round(min(MAX_IMPORTANCE, BASE + total), 4), signals, question)


def raised_importance(table_value: float, text: str) -> float:
    """A memory's importance: the review's table value (seed 003), raised to the fact estimate of `text` where
    the table gives less."""
    return max(table_value, estimate_importance(text).importance)
