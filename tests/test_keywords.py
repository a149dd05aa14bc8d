"""Keyword extraction and CJK-safe tokenisation (seed 001 keywords, 关键词匹配, 记忆去重)."""

from __future__ import annotations

import random

from personalab.nodes.rules.keywords import (
    MatchText,
    extract_keywords,
    jaccard,
    keyword_in,
    keyword_match_score,
    memory_search_text,
    query_tokens,
    search_tokens,
    stem,
    text_similarity,
    token_set,
    tokenize,
)


def test_chinese_is_segmented_by_jieba_not_by_spaces() -> None:
    tokens = tokenize("昨天和John讨论了种植计划")
    assert {"昨天", "john", "讨论", "种植", "计划"} <= set(tokens)
    assert "昨天和John讨论了种植计划" not in tokens


def test_full_width_punctuation_and_whitespace_never_become_tokens() -> None:
    tokens = tokenize("你好，我是白小喵！　今天……天气真好？（笑）「嗯」")
    assert tokens
    assert not any(ch in token for token in tokens for ch in "，！　…？（）「」 ")


def test_chinese_function_words_are_dropped() -> None:
    tokens = tokenize("我们的计划了吗")
    assert "的" not in tokens and "了" not in tokens and "吗" not in tokens
    assert "计划" in tokens


def test_search_mode_adds_the_parts_of_long_chinese_words() -> None:
    assert {"北京", "大学", "北京大学"} <= set(tokenize("北京大学"))
    assert "北京" not in tokenize("北京大学", search=False)


def test_english_is_lower_cased_stemmed_and_stripped_of_stop_words() -> None:
    assert tokenize("Caroline's paintings were PAINTED in the park") == ["caroline", "paint", "paint", "park"]


def test_stemming_maps_inflections_to_one_form() -> None:
    assert stem("running") == stem("run") == "run"
    assert stem("studies") == stem("studied") == "study"
    assert stem("planned") == "plan"
    assert stem("class") == "class"  # no plural to strip


def test_mixed_chinese_and_english_text() -> None:
    tokens = tokenize("我和Melanie去了camping，很开心")
    assert {"melanie", "camp", "开心"} <= set(tokens)


def test_chinese_keywords_are_extracted_without_function_words() -> None:
    keywords = extract_keywords("昨天和John讨论了种植计划，我们要在北京大学附近建造新的防御塔。")
    assert {"种植", "讨论", "北京大学", "防御", "建造"} <= set(keywords)
    assert not {"了", "和", "的", "，", "。"} & set(keywords)


def test_english_keywords_are_extracted_without_stop_words() -> None:
    keywords = extract_keywords("Caroline went to the LGBTQ support group yesterday, and the group was great.")
    assert keywords[0] == "group"  # said twice
    assert {"caroline", "lgbtq", "support", "yesterday"} <= set(keywords)
    assert not {"the", "to", "and", "was"} & set(keywords)


def test_keyword_count_is_capped() -> None:
    text = "种植 计划 防御 建造 讨论 附近 昨天 北京 上海 广州 深圳"
    assert len(extract_keywords(text, top_k=5)) == 5
    assert extract_keywords("", top_k=5) == []
    assert extract_keywords("的了吗，。", top_k=5) == []


def test_chinese_keyword_matches_as_a_substring() -> None:
    assert keyword_in("种植", MatchText.of("种植计划怎么样了？"))
    assert not keyword_in("防御", MatchText.of("种植计划怎么样了？"))


def test_english_keyword_matches_whole_words_only() -> None:
    context = MatchText.of("Let's go to the party, I love painting")
    assert not keyword_in("art", context)
    assert keyword_in("party", context)
    assert keyword_in("paintings", context)  # same stem
    assert keyword_in("Party", context)  # case-insensitive


def test_keyword_match_score_is_the_share_of_keywords_found() -> None:
    context = MatchText.of("种植计划怎么样了? Let's talk about the party")
    assert keyword_match_score(["种植", "计划", "art", "party", "防御"], context) == 0.6
    assert keyword_match_score([], context) == 0.0


def test_text_similarity_is_jaccard_on_cjk_tokens() -> None:
    assert text_similarity("我昨天去了北京", "我昨天去了北京") == 1.0
    assert text_similarity("我昨天去了北京", "今天天气很好") == 0.0
    assert 0.0 < text_similarity("我昨天去了北京", "我昨天去了上海") < 1.0
    assert jaccard(frozenset(), frozenset()) == 0.0
    assert token_set("Hello, world!") == frozenset({"hello", "world"})


def test_a_text_of_several_lines_has_the_tokens_of_the_whole_text() -> None:
    """Lines are tokenized (and cached) one by one: the result is the whole text's tokenization."""
    from personalab.nodes.rules.keywords import _line_tokens

    rng = random.Random(8)
    pieces = [
        "净水厂",
        "发电机零件",
        "Aiko's kitten",
        "running",
        "，",
        "。",
        " ",
        "\n",
        "\n\n",
        "我们",
        "无线电",
        "don't",
        "42",
    ]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        for search in (True, False):
            assert tokenize(text, search=search) == list(_line_tokens(text, search))


def test_a_query_loses_its_chinese_question_words_and_recall_framing() -> None:
    # the answer to 我妹妹叫什么名字 holds her name, not 什么; 还记得…吗 and …来着 only frame the question
    assert query_tokens("你还记得我妹妹叫什么名字吗？")[:5] == ["你", "我", "妹妹", "叫", "名字"]
    assert "来" not in query_tokens("我妹妹最爱吃什么来着？") and "最爱" in query_tokens("我妹妹最爱吃什么来着？")
    # 什么时候 goes whole: search mode would leave 时候, a content word (小时候, 过河的时候)
    assert "时候" not in query_tokens("我们什么时候去的水库？")
    crossing = query_tokens("过河的时候我为什么总是犹豫？")
    assert "时候" in crossing and "为什么" not in crossing
    assert not {"哪儿", "哪", "谁"} & set(query_tokens("万一我们失散了，你会去哪儿等我？谁留给我的？"))


def test_a_query_loses_english_question_framing_and_keeps_its_content() -> None:
    assert query_tokens("Is it likely that Nate has friends besides Joanna?") == ["nate", "friend", "beside", "joanna"]
    assert query_tokens("What kind of pot did Mel make?") == ["pot", "mel", "make"]
    assert query_tokens("Do you like painting?") == ["like", "paint"]  # "like" itself is content
    assert query_tokens("什么？") == tokenize("什么？")  # nothing but question words: the query as it is


def test_search_tokens_add_the_characters_of_chinese_words() -> None:
    # 害怕 and 最怕, 失散 and 走散 share no word, only a character
    assert "怕" in search_tokens("我最怕深水") and "怕" in search_tokens("我最害怕的是什么")
    assert set(search_tokens("要是走散了")) & set(search_tokens("万一我们失散了")) >= {"散"}
    tokens = search_tokens("上下文")  # search mode gives 上下, 下文, 上下文; each character still counts once
    assert tokens.count("下") == 1 and tokens[: len(tokenize("上下文"))] == tokenize("上下文")
    assert "的" not in search_tokens("我的朋友们")  # stop characters stay out
    assert search_tokens("I painted the lake") == tokenize("I painted the lake")  # English unchanged


def test_a_memorys_search_text_weighs_its_own_words_twice_its_context_once() -> None:
    text = memory_search_text("雷娜：水塔", context="林澈：碰头").split()
    assert text.count("水塔") == 2 and text.count("碰头") == 1
    assert memory_search_text("水塔", ["废土"]).split().count("废土") == 1


def test_keywords_rank_by_jiebas_idf_without_loading_its_tfidf_module() -> None:
    """Issue 26: the IDF table is read from jieba's file into two arrays, with jieba's values and median, and
    extracting keywords never imports `jieba.analyse` (a dict of 270,000 words) nor the `jieba.posseg` it pulls in
    (~96 MiB that stayed in every process)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from personalab.nodes.rules.keywords import extract_keywords\n"
        "print(extract_keywords('雷娜在黑市找到了一封信，老陈很开心。'))\n"
        "print(sorted(m for m in ('jieba.analyse', 'jieba.posseg') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "[]"
    assert "黑市" in result.stdout.splitlines()[-2]

    import jieba.analyse
    from personalab.nodes.rules.keywords import IdfTable, _idf

    table, median = _idf()
    jiebas = jieba.analyse.default_tfidf
    assert table.size == len(jiebas.idf_freq) and median == jiebas.median_idf
    assert all(table.get(word, -1.0) == idf for word, idf in jiebas.idf_freq.items())
    assert table.get("没有这个词的词表", 7.5) == 7.5
    # a word listed twice keeps its last value (jieba's dict), blank lines are skipped, an empty table is empty
    small = IdfTable.parse("雷娜 1.5\n\n黑市 2.0\n雷娜 3.0\n")
    assert (small.size, small.get("雷娜", 0.0), small.get("黑市", 0.0), small.median) == (2, 3.0, 2.0, 3.0)
    assert IdfTable.parse("").size == 0 and IdfTable.parse("").get("雷娜", 1.0) == 1.0
