"""The Chinese edition's catalogues (issue 24), as the tests read them: one gettext catalogue
per document under locales/<language>/LC_MESSAGES/ (`make locales` writes them with
sphinx-intl), and the manifest locales/<language>/TRANSLATED of the documents whose every
message is translated."""
import re
from pathlib import Path

from babel.messages.pofile import read_po

REPO = Path(__file__).resolve().parent.parent
LOCALES = REPO / "locales"
LANGUAGE = "zh_CN"
MESSAGES = LOCALES / LANGUAGE / "LC_MESSAGES"
# the diagrams' labels (chapters/figures/make_diagrams.py), beside the documents' catalogues
# but no document's: `make locales` keeps it current as it keeps theirs; so are the labels of
# the notebooks' plots (_ext/plot_labels.py, _ext/plot_language.py, tests/test_plot_labels.py)
# and what their code prints (_ext/print_messages.py, _ext/print_language.py,
# tests/test_print_messages.py)
FIGURES_CATALOGUE = "figures"
PLOTS_CATALOGUE = "plots"
PRINTS_CATALOGUE = "prints"
# the checks' messages (chapters/checks/*.py's MESSAGES, autograde/checks_catalogue.py), the
# same: no document's (tests/test_check_messages_zh.py holds it to the checks' English)
CHECKS_CATALOGUE = "checks"
# the grader's sentences (autograde/messages.py): feedback, report, the grader's verdicts
GRADER_CATALOGUE = "grader"

# What a message holds that is not prose, and is neither translated nor searched for terms:
# code spans, MyST roles' targets ({doc}`student_guide`), maths, link targets, addresses.
NOT_PROSE = re.compile(r"\{[a-z]+\}`[^`]*`|`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|\]\([^)]*\)|https?://\S+",
                       re.S)


def catalogue_path(document, messages=MESSAGES):
    """locales/zh_CN/LC_MESSAGES/chapters/intro.po for the document chapters/intro."""
    return messages / f"{document}.po"


def read_catalogue(path):
    with open(path, "rb") as file:
        return read_po(file)


def translated_documents(language=LANGUAGE):
    """The documents the manifest lists, in its order."""
    lines = (LOCALES / language / "TRANSLATED").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def catalogued_documents(messages=MESSAGES, suffix=".po"):
    """Every document that has a catalogue (or, suffix=".pot", a template): {document: path}.
    The figures', the plots', the printed output's, the checks' and the grader's catalogues
    are no document's."""
    found = {str(p.relative_to(messages).with_suffix("")): p
             for p in sorted(messages.rglob(f"*{suffix}"))}
    for catalogue in (FIGURES_CATALOGUE, PLOTS_CATALOGUE, PRINTS_CATALOGUE, CHECKS_CATALOGUE,
                      GRADER_CATALOGUE):
        found.pop(catalogue, None)
    return found


def prose(text):
    """`text` without what NOT_PROSE matches."""
    return NOT_PROSE.sub(" ", text)
