"""The language the checks speak, and their messages in it (issue 24).

Every module of the checks keeps its English templates in one dict at its top, wrapped once:

    MESSAGES = translated(__name__) | {"key": "English template {field}", ...}

A lookup, MESSAGES["key"], gives the template in the language of now (its fields named as
in English, so `.format(...)` is the same call in every language), or the English where the
catalogue has no translation of it, as gettext itself falls back. The catalogue is the
gettext catalogue `checks` of that language; each message's context is "<module>.<key>"
("attention.scores_passed", "diversity.mode_words.state" for a nested dict), so the same
English in two places may be translated differently.

The language of now, first found of:
  1. the grader's choice for the notebook it grades (speaking(), from the notebook's
     metadata course.language: autograde.notebook.language);
  2. the environment variable COURSE_LANGUAGE (e.g. "zh_CN");
  3. the file LANGUAGE beside this module, which the release of a chapter in another
     language writes into its checks/ (autograde.course.release_language): a student who
     unzips the Chinese chapter gets Chinese checks without setting anything;
  4. English.
The catalogue: locale/<language>/LC_MESSAGES/checks.mo beside this module (the kit's copy,
compiled by autograde.kit.write_checks), else, in the repository, the translators'
locales/<language>/LC_MESSAGES/checks.po compiled in memory by Babel (the grader's side,
where Babel is installed; the student's kit needs the standard library only).
"""
import contextlib
import contextvars
import functools
import gettext
import io
import os
from collections.abc import Mapping
from pathlib import Path

DOMAIN = "checks"
ENGLISH = "en"
ENVIRONMENT = "COURSE_LANGUAGE"
HERE = Path(__file__).resolve().parent
MARKER = HERE / "LANGUAGE"
KIT_LOCALE = HERE / "locale"
# the repository's catalogues (absent from the kit: chapters/checks/ -> locales/)
REPO_LOCALE = HERE.parent.parent / "locales"

_chosen = contextvars.ContextVar("checks_language", default=None)


def current():
    """The language the checks speak now, e.g. "zh_CN" or "en" (see the module's doc)."""
    chosen = _chosen.get() or os.environ.get(ENVIRONMENT, "").strip()
    if not chosen and MARKER.is_file():
        chosen = MARKER.read_text(encoding="utf-8").strip()
    return chosen or ENGLISH


@contextlib.contextmanager
def speaking(language):
    """Within the block, the checks speak `language` (None or "": as if not called)."""
    token = _chosen.set(language or None)
    try:
        yield
    finally:
        _chosen.reset(token)


@functools.lru_cache(maxsize=None)
def catalogue(language):
    """The gettext translations of the checks' messages in `language` (NullTranslations,
    which returns the English, for English or a language without a catalogue)."""
    if language == ENGLISH:
        return gettext.NullTranslations()
    compiled = gettext.find(DOMAIN, str(KIT_LOCALE), [language])
    if compiled:
        with open(compiled, "rb") as file:
            return gettext.GNUTranslations(file)
    source = REPO_LOCALE / language / "LC_MESSAGES" / f"{DOMAIN}.po"
    if source.is_file():
        try:  # the grader's side only: the kit ships the compiled catalogue
            from babel.messages.mofile import write_mo
            from babel.messages.pofile import read_po
        except ImportError:
            return gettext.NullTranslations()
        with open(source, "rb") as file:
            messages = read_po(file, locale=language)
        buffer = io.BytesIO()
        write_mo(buffer, messages)  # (fuzzy translations left out, as msgfmt does)
        buffer.seek(0)
        return gettext.GNUTranslations(buffer)
    return gettext.NullTranslations()


class Translated(Mapping):
    """A module's MESSAGES: {key: English template, or a dict of them}, looked up in the
    language of now. `.english` holds the dict as written; `.context` the message contexts'
    prefix ("attention", or "diversity.mode_words" for a nested dict)."""

    def __init__(self, context, english):
        self.context, self.english = context, english

    def __getitem__(self, key):
        english = self.english[key]
        where = f"{self.context}.{key}"
        if isinstance(english, Mapping):
            return Translated(where, english)
        return catalogue(current()).pgettext(where, english)

    def __iter__(self):
        return iter(self.english)

    def __len__(self):
        return len(self.english)

    def __or__(self, english):
        """These messages and the templates of the dict `english` (which win), as dict's |."""
        return Translated(self.context, {**self.english, **english})

    def __repr__(self):
        return f"Translated({self.context!r}, {self.english!r})"


def translated(module, english=None):
    """MESSAGES of the checks module named `module` (its __name__: "checks.attention" or
    "chapters.checks.attention", both giving the contexts "attention.<key>"), from its
    English templates `english` (see Translated). A module writes
    `MESSAGES = translated(__name__) | {...}`: its dict stays a plain literal, closed by its
    own brace."""
    return Translated(module.rsplit(".", 1)[-1], dict(english or {}))


def languages():
    """The languages other than English that the checks have a catalogue of: the kit's
    compiled ones, or the repository's."""
    found = {p.parent.parent.name for p in KIT_LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.mo")}
    found |= {p.parent.parent.name for p in REPO_LOCALE.glob(f"*/LC_MESSAGES/{DOMAIN}.po")}
    return sorted(found)


# The kit replays the @reference functions' results from fixtures recorded in English
# (checks.common); the messages among them (a per-bug table's keys) are recorded in each
# other language too, as the list of a result's strings, and put back in their place.
def texts(value):
    """Every string of `value`, dicts' keys included, walking dicts, lists and tuples."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in texts(key) + texts(item)]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in texts(item)]
    return []


def with_texts(value, replacements):
    """`value` with its strings replaced, in the order texts() lists them, by the next ones
    of the iterator `replacements`."""
    if isinstance(value, str):
        return next(replacements)
    if isinstance(value, dict):  # (a key is evaluated before its value)
        return {with_texts(key, replacements): with_texts(item, replacements)
                for key, item in value.items()}
    if isinstance(value, list):
        return [with_texts(item, replacements) for item in value]
    if isinstance(value, tuple):
        items = [with_texts(item, replacements) for item in value]
        return tuple(items) if type(value) is tuple else type(value)(*items)
    return value

