"""locales/zh_CN/GLOSSARY.md, the one list of the Chinese edition's terms (issue 24): one
Chinese term per English term, each written in Chinese (or kept in English on purpose, with
the reason), no English term twice, no Chinese term for two concepts."""
import re
from pathlib import Path

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
