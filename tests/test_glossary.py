"""locales/zh_CN/GLOSSARY.md, the one list of the Chinese edition's terms (issue 24): one
Chinese term per English term, each written in Chinese (or kept in English on purpose, with
the reason), no English term twice, no Chinese term for two concepts; and each translated
message (locales/zh_CN/TRANSLATED) that uses a term in English uses its Chinese term. Where a
message uses the English word in another sense (a login "token"), a translator's comment in
the catalogue says so: `# glossary: token means an access token here`."""
import re
from pathlib import Path

from babel.messages.catalog import Message

from tests.translations import catalogue_path, prose, read_catalogue, translated_documents

GLOSSARY = Path(__file__).resolve().parent.parent / "locales" / "zh_CN" / "GLOSSARY.md"
ROW = re.compile(r"^\| (?!English)([^|]+?) \| ([^|]+?) \| ([^|]*?) ?\|$", re.M)
HAN = re.compile(r"[\u4e00-\u9fff]")


def glossary():
    """[(English, 中文, note)] of the glossary's tables."""
    return [tuple(cell.strip() for cell in row) for row in ROW.findall(GLOSSARY.read_text())]


def test_each_term_once_each_in_chinese_or_kept_with_a_reason():
    rows = glossary()
    assert len(rows) >= 60
    english = [e for e, _, _ in rows]
    assert len(english) == len(set(english)), "an English term twice"
    chinese = [c for _, c, _ in rows]
    assert len(chinese) == len(set(chinese)), "one Chinese term for two concepts"
    for e, c, note in rows:
        assert HAN.search(c) or "kept in English" in note, (e, c)


# Each glossary term as the translations are checked against it: the English and the Chinese
# without their parenthesised parts (`head_dim`, "(GQA)", "（打破）"), each split at " / " and
# ", " into alternatives that pair in order ("query / key / value" -> 查询 / 键 / 值); where the
# two split into different numbers, the English is one phrase ("predict, then run").
PARENTHESES = re.compile(r"\s*[(（][^)）]*[)）]")
ALTERNATIVES = re.compile(r" / |, ")


def term_pairs(rows=None):
    """[(English, 中文)] to look for, from the glossary's rows (English, 中文, note)."""
    pairs = []
    for english, chinese, _ in rows if rows is not None else glossary():
        english_parts = ALTERNATIVES.split(PARENTHESES.sub("", english))
        chinese_parts = ALTERNATIVES.split(PARENTHESES.sub("", chinese))
        if len(english_parts) != len(chinese_parts):
            english_parts, chinese_parts = [PARENTHESES.sub("", english)], [PARENTHESES.sub("", chinese)]
        pairs += [(e.strip(), c.strip()) for e, c in zip(english_parts, chinese_parts)]
    return pairs


def _english_term(term):
    """The term as a word or phrase of prose: any case, a plural ending, not part of a longer
    word or of a hyphenated one ("head" is not in "headless" or "multi-head")."""
    stem, plural = (term[:-1], "(?:y|ies)") if term.endswith("y") else (term, "(?:s|es)?")
    return re.compile(r"(?<![\w-])" + re.escape(stem) + plural + r"(?![\w-])", re.I)


def missing_terms(english, chinese, exempt=(), pairs=None):
    """[(English term, 中文 term)] of each term in the prose of `english` whose Chinese is not
    in `chinese`. `exempt`: English terms that this message uses in another sense."""
    text = prose(english)
    pairs = pairs if pairs is not None else term_pairs()
    spans = {e: [m.span() for m in _english_term(e).finditer(text)] for e, _ in pairs}
    # where a longer term holds this one and is translated ("embedding" in "rotary position
    # embedding", 旋转位置编码), the longer term's Chinese stands for both
    translated = [span for e, c in pairs if c in chinese for span in spans[e]]

    def within_longer(span):
        return any(a <= span[0] and span[1] <= b and b - a > span[1] - span[0]
                   for a, b in translated)
    return [(e, c) for e, c in pairs
            if e not in exempt and spans[e] and c not in chinese
            and not all(within_longer(span) for span in spans[e])]


def exemptions(message):
    """The English terms a translator's comment "glossary: TERM means ... here" exempts (the
    catalogue may wrap a comment over several lines)."""
    return set(re.findall(r"glossary: (.+?) means ", " ".join(message.user_comments)))


def test_each_glossary_term_is_translated_by_its_chinese_term():
    pairs = term_pairs()
    assert ("query", "查询") in pairs and ("KV cache", "键值缓存") in pairs
    assert ("merge", "合并") in pairs and ("predict, then run", "先预测，再运行") in pairs
    report = []
    for document in translated_documents():
        for message in read_catalogue(catalogue_path(document)):
            if message.id:
                for english, chinese in missing_terms(message.id, message.string,
                                                      exemptions(message), pairs):
                    report.append(f"{document}: {english!r} without {chinese!r} in {message.string[:60]!r}")
    assert report == []


def test_the_term_check_catches_a_term_not_used():
    pairs = term_pairs()
    assert missing_terms("Apply the padding masks", "应用填充遮挡", pairs=pairs) == [
        ("mask", "掩码"), ("padding mask", "填充掩码")]
    assert missing_terms("two queries", "两个查询", pairs=pairs) == []
    assert ("head", "头") in missing_terms("the heads", "各个部分", pairs=pairs)
    assert missing_terms("a headless browser and `num_heads`", "无界面浏览器", pairs=pairs) == []
    assert missing_terms("the token of yours", "你的令牌", {"token"}, pairs) == []
    rotary = [("embedding", "嵌入"), ("rotary position embedding", "旋转位置编码")]
    assert missing_terms("a rotary position embedding", "旋转位置编码", pairs=rotary) == []
    assert missing_terms("a rotary position embedding and an embedding", "旋转位置编码",
                         pairs=rotary) == [("embedding", "嵌入")]
    assert missing_terms("a rotary position embedding", "旋转的位置", pairs=rotary) == rotary
    message = Message("a token of yours", "你的令牌",
                      user_comments=["glossary: token means an access token", "here"])
    assert exemptions(message) == {"token"} and exemptions(Message("a token", "令牌")) == set()
