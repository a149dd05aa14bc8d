"""The fact-importance estimate (nodes/rules/importance.py, issue 11 "what matters is kept").

Two labelled sets of real dialogue lines, neither written for the engine: Chinese user lines of MemoryBank-cn
(Zhong et al. 2024, SiliconFriend, MIT) and English lines of LoCoMo, seeded random samples. Labels by hand: a
*fact* tells something concrete about a person worth recalling later (a name, a possession, a plan, a habit or
preference, an event with specifics); chit-chat is greetings, thanks, questions, feelings and reactions without
such content; lines too ambiguous to label were left out.

- DEV (seed 11: 45 Chinese drawn, 6 left out; 16 English): drawn after the first rules were written and
  measured on them untouched (precision .68, recall .76); the rules were then corrected on it (a case-blind
  ``I'm X`` name pattern, 一 as an article, 我的 + any noun as possession, question clauses, doing-words).
- HELD_OUT (seed 12, lines of DEV excluded: 30 Chinese drawn, 3 left out; 14 English): labelled before the
  corrected rules were run on them once; not used for any change after.
"""

from __future__ import annotations

import pytest
from personalab.nodes.rules.importance import FACT_THRESHOLD, estimate_importance, raised_importance
from personalab.nodes.rules.review.rules import run_rule_review
from personalab.nodes.rules.review.types import ReviewInput

DEV_FACTS = [
    "我比较喜欢自然风光，你有推荐的地方吗？",
    "是的，我计划去一些其他的博物馆和艺术展览，体验更多的文化和艺术。",
    "是的，我想跟你聊聊我的写作进度。我在写一篇小说，但是感觉自己的创作力有些不足，进展缓慢。",
    "你好，我是陆琳。今天第一次和你聊天，感觉有些紧张。",
    "我最近打算去攀登华山，体验更加刺激的同时也增强自己的身体素质。",
    "好厉害，你知道的真是很多。确实，每当我来到自然环境中，就会感到一种深深的放松和享受。除了自然环境，我还很喜欢听音乐，特别是爵士乐。你喜欢听音乐吗？",
    "好的，听起来非常棒。现在我要去享受我的生日了。谢谢你的陪伴，我们下次再聊，再见！",
    "我喜欢看动作片和喜剧片，这些种类的电影总是让我感到兴奋和愉快。",
    "我们看了一部文艺片，叫做《出租车司机》。我觉得这部电影非常有意思，画面很美，主题也非常深刻。",
    "我会听古典音乐、阅读、旅行和做饭来放松。不过现在压力大，好像也没有办法很好地放松。",
    "你好，AI伴侣。今天我有一个小问题想要请教你。我最近在学习绘画，但是总觉得自己的画画水平不怎么好，不知道该怎么提高。",
    "我通常会听一些舒缓的音乐，瑜伽和冥想也会有所帮助。但是今天，我似乎需要一次完全的放松和解脱。",
    "我买了一件新的白色连衣裙，它很漂亮，有点简约但又不失优雅。我很喜欢这种气质。",
    "谢谢。我申请了一份编辑的工作。不过，我很担心自己的表现，很难想象自己会成功。",
    "你知道吗？我最近开始学做菜了，感觉这个过程很有意思，你也喜欢做菜吗？",
    "是的，我喜欢户外活动，像滑板、攀岩和街舞等等。",
    "你好，我叫张志强，很高兴认识你。",
    "我打算先去城市里的一些文化遗产，比如玛雅文明和阿兹特克文明时期的城市和建筑群。我也想去一些著名的博物馆，看看那里的艺术、手工艺品和手工制品。等我走得累的时候，我希望能在一些当地市场、小餐馆和街头小吃摊品尝当地美食。",
    "Indeed, I remember this moment. We loved skateboards back then, sometimes we even left class early to do it. I still like to go for a ride sometimes, and I even taught my dogs how to balance on it.",
    "I was stoked about my achievement. Though I didn't win the tournament, I still received some money for the 2nd place. Seeing my effort pay off was awesome.",
    "Travel was also her great passion!",
    "Wow, that's cool. I love hiking, but it's been ages since I've done it. I did this hike with my dad way back when I was ten. Going hiking together was great fun, and really special for us.",
    "Thanks so much! I had to plan and research a lot to design and build a sustainable water purifier for a rural community in need. It was tough, but I loved the experience.",
    " His name's Ned and he's been awesome since I adopted him. I can't imagine life without him. It's great to hear that your siblings signed up for programming.",
    "Hey Sam, tough news. Yeah, our health can really put a damper on things. I started lifting weights one year ago and it's been a journey. It was a struggle at first, but I'm seeing some gains. You interested in trying it out?",
]

DEV_CHIT_CHAT = [
    "是的，我想我需要与他谈谈。但我也感到非常疲惫和无望，我感觉我不知道该如何继续下去。",
    "我也说不准，就是感到有些烦躁和紧张，好像无论做什么都无法释放掉这种不好的情绪。我不知道这是为什么。",
    "景色非常迷人，山脉起伏不已，还能看到雪山和河流。特别是站在山顶上，我的心情一下子变得非常舒畅。",
    "你好，朋友，今天想和你聊聊。我最近一直在思考人生的意义，特别是对我个人而言。你觉得人生的意义是什么？",
    "最近看了一部电影，它讲述了一个十分感人的故事。我真的被深深打动了，你愿意听我分享吗？",
    "不客气，互相学习互相进步嘛。",
    "这听起来不错，可以让我更好的了解自己。除了这个，你还有什么建议吗？",
    "你可以看一些中央电视台的推出的《回家吃饭》，还有一些各地美食博主在抖音等平台分享的菜品制作过程，很有启发和趣味。",
    "那你对于学习的建议是什么？",
    "你好，朋友。今天我想和你聊聊我的旅行计划。",
    "嗯，这些方法听起来都很实用。还有一个问题，我最近在学习一门新技能，但感觉进步缓慢，不太自信。你有没有什么提高学习效率的建议？",
    "嗯，你说得对。我会尽情享受自己喜欢的活动。非常感谢你的建议，AI伴侣！",
    "你好，今天我想和你聊一聊我的情感问题。",
    "真厉害，你的语言天赋肯定非常出色。也谢谢你愿意教我，我会琢磨琢磨，也许会选择跟你学习呢！",
    "你好啊AI伴侣，今天我去了公园散步，看到了一些非常漂亮的景色，好想和你分享。",
    "这些都是非常好的建议，我会在日后的生活和学习中谨记你的话。感谢你一直以来的陪伴和支持。",
    "你好，朋友。今天我真的很困，但还有很多工作要做，感觉自己已经没法集中注意力了。",
    "那你有什么具体的肌肉松弛和身体舒展的方法吗？",
    "嗯，但是我的朋友们好像都很忙，没有时间来陪我。我不知道该怎么办，觉得很无助。",
    "好的，谢谢你的建议。我还想问你一些关于旅游的问题，夏天到了，你有没有推荐的旅游线路呢？",
    "谢谢你的建议，我会考虑尝试这些方法。但是，我总觉得我的作品可能不会被人喜欢，而且现在市场上也有很多优秀的小说。",
    "Congrats on the milestone. What was it and what made it challenging? What did you learn?",
    "No problem. You got this! ",
    "Pets definitely bring tons of joy. They are always there for us and they're so cute! Relaxing with them is a great way to chill.",
    "Wow, those sound great! Who can say no to chocolate and berries? I'm tempted to try dairy-free flavors now!",
    "Absolutely. It makes a big difference knowing you're not alone in these situations.",
    "You too, take care!",
    "Yeah, Gina! We'll rock the dance floor and teach others to chase their dreams. Let's go for it and make an impact!",
    "Give it a shot! It`s really great. No regrets, I promise.",
    "That's good to hear, I'm glad.",
]


HELD_OUT_FACTS = [
    "我知道，但是我总觉得自己无法找到真正喜欢和适合的领域。最近我在找了几份工作，但是都没有得到面试的机会。",
    "你好啊，朋友。今天我去了电影院，看了一部爱情电影《泰坦尼克号》，很感人呢。你有最喜欢的电影吗？",
    "我一般会配一些清淡的蔬菜，比如西葫芦或是西兰花，这样口感就更加清爽。",
    "好啊！最近我和同事们组了个羽毛球小组，每周都会在周末去打球。",
    "我很喜欢绘画、弹钢琴和品茶，你觉得有什么好的书可以推荐给我吗？",
    "都听起来不错呢！但是我更倾向于回归青春，做一些有趣的事情。比如玩电子游戏、看动漫、玩玩具等等。你觉得这样的活动不太合适我的年龄吗？",
    "你好，我叫曹志强，很高兴见到你。",
    "你好，我是姚国栋。很高兴认识你。",
    "你好，我叫刘琳，很高兴认识你。",
    "我知道他喜欢旅游，喜欢尝试新的美食，也很喜欢着名的画家。",
    "你好，我是陈阳。很高兴认识你这个聊天ai。",
    "最近我在学做菜，昨天晚上我做了一道宫保鸡丁，味道还不错。",
    "哈哈，是啊，你没法品尝食物。但是你的建议很有用，有空我可以去尝尝。话说回来，我最近在看一些军事类的书籍，觉得很有趣。不知道你是否喜欢军事历史？",
    "我喜欢摇滚音乐，我喜欢AC/DC、枪与玫瑰等摇滚乐队。",
    "Me and my siblings don't hang out much since we live far apart, but when we do we always try to plan a gaming night.",
    "Yeah! Winning a championship is my number one goal. But I also want to make a difference away from the court, like through charity or inspiring people. Basketball has been great to me, so I want to give something back.",
    "Thanks, John! It can be tough, but aerial yoga is totally worth it. I love the freedom and connection it brings. Appreciate your support!",
    "Thanks Mel! I'm going to a transgender conference this month. I'm so excited to meet other people in the community and learn more about advocacy. It's gonna be great!",
    "It was really a dream come true! Watching that movie with my family was awesome, we'd all get comfy with snacks and a blanket and be totally absorbed. Such a special memory!",
]

HELD_OUT_CHIT_CHAT = [
    "你好，朋友。今天有一些烦恼，想跟你聊聊。",
    "你好，朋友，今天天气真是好啊。我和朋友们去了一个新的景点，那里的景色非常美丽。你有什么喜欢的景点或者旅游地点吗？",
    "你好，朋友，今天工作还算顺利，但是晚上我想尝试一些新菜肴，你有什么新鲜的想法吗？",
    "有点不太开心，最近工作上出了一些问题，感觉有些力不从心。",
    "这个方法听起来不错，我想试试看。非常感谢你的建议！",
    "你好，朋友。今天想和你谈谈我的旅游计划。",
    "听着是挺不错的，但是我的工作满满的，时间很不够用啊。",
    "你好，朋友。今天我想请教你一个问题，我最近总是觉得身体疲劳，没有精神。你有什么好的建议吗？",
    "这些也都是我很喜欢的活动，确实可以让我心情愉悦。谢谢你的建议。",
    "好的，我大概理解了。但是我还是有一些疑惑，比如函数的参数和返回值应该怎么定义和使用？",
    "这听起来很有道理，但是我对幸福和自由的理解可能和别人不同。你觉得如何才能实现个人价值和使命呢？",
    "不用谢，如果你有什么好电影也可以分享给我哦。",
    "是的，我想我需要放松一下，减轻烦躁感。你有什么好的放松和减压的方法吗？",
    "Yeah, that mix really keeps me motivated and makes it all worthwhile.",
    " How do you manage your time and stay organized with all the projects and deadlines?",
    "Nah, haven't gone hiking recently, but it's awesome - being in nature and pushing yourself to new heights. Clears your mind and brings a sense of calm. Have you been to the mountains before? Heard they're super chill.",
    "The hats don't bother them, they just put them on for fun and treats. And the dog park is great place to start! They can run and mingle with other pooches. It's such a fun spot for playdates!",
    "Here's a photo of them after their grooming - look how soft and fluffy they are!",
    "Yeah! Their love and energy can really brighten up a day. It's amazing how close we can get to them and the memories they create for us. Do you have any other special memories with Max that you remember fondly?",
    "That's why we are friends, to support each other! Well, I have to go, bye!",
    "Hey Sam, hope you're doing good. Something funny happened last night.",
    "Gotcha, John. Finding a way to make a difference matters. Have you thought about any ideas on how to do that?",
]


def scores(facts: list[str], chit_chat: list[str]) -> tuple[float, float, list[str], list[str]]:
    """(precision, recall, missed facts, chit-chat taken for facts) of `is_fact` on labelled sentences."""
    missed = [s for s in facts if not estimate_importance(s).is_fact]
    false = [s for s in chit_chat if estimate_importance(s).is_fact]
    true_positives = len(facts) - len(missed)
    precision = true_positives / max(1, true_positives + len(false))
    recall = true_positives / len(facts)
    return precision, recall, missed, false


@pytest.mark.parametrize(
    ("name", "facts", "chit_chat", "floor"),
    [("dev", DEV_FACTS, DEV_CHIT_CHAT, 0.75), ("held-out", HELD_OUT_FACTS, HELD_OUT_CHIT_CHAT, 0.6)],
)
def test_precision_and_recall(name: str, facts: list[str], chit_chat: list[str], floor: float) -> None:
    precision, recall, missed, false = scores(facts, chit_chat)
    print(f"\n{name}: {len(facts)} facts, {len(chit_chat)} chit-chat; precision {precision:.2f}, recall {recall:.2f}")
    for sentence in missed:
        print(f"  missed fact: {sentence[:50]}")
    for sentence in false:
        print(f"  chit-chat counted as fact: {sentence[:50]}")
    # the floor a user relies on: most facts kept, most small talk not raised
    assert recall >= floor
    assert precision >= floor


@pytest.mark.parametrize(
    "text",
    [
        "我妹妹今年十二岁",
        "我叫李明，住在杭州",
        "我答应你，明年春节一定回来看你",
        "My sister is twelve and lives in Boston",
    ],
)
def test_the_issue_s_facts_reach_the_archive_threshold(text: str) -> None:
    estimate = estimate_importance(text)
    assert estimate.importance >= FACT_THRESHOLD, estimate.reason()


@pytest.mark.parametrize("text", ["哈哈", "好的", "嗯嗯，我知道了", "你好呀", "ok, thanks!", ""])
def test_small_talk_raises_nothing(text: str) -> None:
    assert estimate_importance(text).importance == 0.0


def test_a_question_tells_less_than_the_statement() -> None:
    assert estimate_importance("你妹妹今年几岁？").importance < estimate_importance("我妹妹今年十二岁").importance


def test_raised_only_where_the_review_table_gives_less() -> None:
    review = run_rule_review(
        ReviewInput(conversation_id=1, character_id=1, user_id="u", user_message="我妹妹今年十二岁")
    )
    assert review.memory_value == 0.0  # seed 003's table is unchanged: a plain fact gets nothing from it
    assert raised_importance(review.memory_value, "我妹妹今年十二岁") >= FACT_THRESHOLD
    assert raised_importance(0.95, "我妹妹今年十二岁") == 0.95
    assert raised_importance(0.3, "哈哈") == 0.3
