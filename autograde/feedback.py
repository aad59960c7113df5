"""Feedback for each student: feedback/<student>/<assignment>.html and a .md twin.

Written from the grading results alone (autograde.results.NotebookResult): the score, each
test cell's points and status, its diagnosis or the check marks a passing check printed,
the errors raised by the student's own cells, and why an ungradable submission could not
be graded. Test source, hidden tests included, is never read here, so it cannot leak.

A result with status "error" either could not be graded at all (every test says why) or
was graded but not recorded in the gradebook: the latter keeps its tests' diagnoses.

Every sentence is a template of autograde.messages, in the language of the student's
notebook (NotebookResult.language): a Chinese submission gets Chinese feedback.

Everything taken from a result is treated as untrusted: diagnoses quote the student's
code and values, so a message may hold "<script>". The HTML escapes all of it and uses no
script or external asset (it opens offline, from a mail attachment or an LMS); the
Markdown keeps it inside code fences, where neither HTML nor Markdown is interpreted.
"""
import html
import re
from pathlib import Path

from autograde import messages

STATUSES = ("passed", "failed", "timeout", "crash", "protocol", "error")
# C0/C1 control characters other than tab and newline: a message is printed by the
# student's code, and escape sequences in it could rewrite an instructor's terminal; and the
# bidirectional overrides and isolates, which reorder what a reader sees of the text
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; }
.score { font-size: 1.25rem; margin: .5rem 0 1.5rem; }
table { border-collapse: collapse; width: 100%; margin-bottom: 1.5rem; }
th, td { border: 1px solid #ccc; padding: .4rem .6rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.points { white-space: nowrap; }
.passed { color: #126b21; font-weight: 600; }
.failed, .timeout, .crash, .protocol, .error { color: #a11d1d; font-weight: 600; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0; font-size: .9em;
      background: #f7f7f7; padding: .4rem; border-radius: 3px; }
.box { border: 2px solid #a11d1d; background: #fff4f4; padding: .6rem 1rem; margin-bottom: 1.5rem; }
"""


def clean(text):
    """`text` as a str without terminal control characters (tab and newline kept)."""
    return _CONTROL.sub("", str(text or ""))


def number(value):
    """2.0 -> "2", 1.5 -> "1.5": points as a person writes them."""
    return f"{float(value):g}"


def path_part(name):
    """`name` if it is a single plain path component; ValueError otherwise.

    Student ids come from folder names under submitted/, but a result file could have
    been edited: never let one write outside feedback/.
    """
    name = str(name)
    if not name or name in {".", ".."} or "/" in name or "\\" in name or "\x00" in name:
        raise ValueError(f"unsafe name for a file or folder: {name!r}")
    return name


def is_ungradable(result):
    """True when no test of the submission ran (not a notebook, wrong file, ...)."""
    return result.status == "error" and all(t.status == "error" for t in result.tests)


def status_label(status, language=messages.ENGLISH):
    """A test's status as the student reads it ("timeout" -> "timed out")."""
    return messages.text(f"status.{status}", language) if status in STATUSES else str(status)


def write_feedback(course_dir, results):
    """Write feedback/<student>/<assignment>.html and .md for every result.

    results: {(student, assignment): NotebookResult}. Returns the paths written.
    """
    root = Path(course_dir) / "feedback"
    written = []
    for (student, assignment), result in sorted(results.items()):
        folder = root / path_part(student)
        folder.mkdir(parents=True, exist_ok=True)
        for suffix, render in ((".html", render_html), (".md", render_markdown)):
            path = folder / f"{path_part(assignment)}{suffix}"
            path.write_text(render(result), encoding="utf-8")
            written.append(path)
    return written


# -- HTML ------------------------------------------------------------------------------
def _e(text):
    return html.escape(clean(text), quote=True)


def _pre(text):
    return f"<pre>{_e(text.rstrip())}</pre>"


def _h(key, language, **markup):
    """The message `key` as HTML: its template escaped, its fields HTML already."""
    return html.escape(messages.template(key, language), quote=True).format(**markup)


def _test_details_html(test, ungradable, language):
    """The diagnosis of a failed test, or what a passing check printed."""
    if ungradable:
        return _h("feedback.see_above", language)
    if test.passed:
        return _pre(test.output) if test.output.strip() else _e(status_label("passed", language))
    return _pre(test.message) if test.message.strip() else ""


def _tests_html(result, ungradable):
    language = result.language
    rows = []
    for test in result.tests:
        rows.append(
            f"<tr><td><code>{_e(test.grade_id)}</code></td>"
            f'<td class="points">{_e(number(test.points))} / {_e(number(test.max_points))}</td>'
            f'<td class="{_e(test.status)}">{_e(status_label(test.status, language))}</td>'
            f"<td>{_test_details_html(test, ungradable, language)}</td></tr>")
    header = "".join(f"<th>{_h(f'feedback.column.{column}', language)}</th>"
                     for column in ("test", "points", "status", "details"))
    return (f"<h2>{_h('feedback.tests', language)}</h2>\n<table>\n<tr>{header}</tr>\n"
            + "\n".join(rows) + "\n</table>")


def _errors(result):
    """The problems that are errors of the student's code (not the instructor's flags)."""
    return [p for p in result.problems if p.get("kind") != "suspicious"]


def _problems_html(result):
    errors = _errors(result)
    if not errors:
        return ""
    items = "\n".join(
        f"<li><strong>{_e(messages.where(problem.get('cell', ''), result.language))}</strong>"
        f"{_pre(problem.get('message', ''))}</li>"
        for problem in errors)
    return (f"<h2>{_h('feedback.errors', result.language)}</h2>\n"
            f"<p>{_h('feedback.errors_explained', result.language)}</p>\n<ul>\n{items}\n</ul>")


def _error_heading(result):
    """Key of the heading over why a submission has no grade in the gradebook."""
    return "feedback.ungradable" if is_ungradable(result) else "feedback.not_recorded"


def render_html(result):
    """One self-contained page (inline CSS, no script, no external asset)."""
    language = result.language
    ungradable = is_ungradable(result)
    title = messages.text("feedback.title", language, assignment=result.assignment,
                          student=result.student)
    error = ""
    if result.status == "error":
        error = (f'<div class="box"><strong>{_h(_error_heading(result), language)}</strong>'
                 f"{_pre(result.error)}</div>")
    score = f"<strong>{_e(number(result.score))}</strong> / {_e(number(result.max_score))}"
    student = f"<strong>{_e(result.student)}</strong>"
    return "\n".join([
        "<!DOCTYPE html>",
        f'<html lang="{_e(messages.html_lang(language))}">',
        '<head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_STYLE}</style></head>",
        "<body>",
        f"<h1>{_e(result.assignment)}</h1>",
        f"<p>{_h('feedback.for', language, student=student)}</p>",
        f'<p class="score">{_h("feedback.score", language, score=score)}</p>',
        error,
        _tests_html(result, ungradable),
        _problems_html(result),
        "</body>",
        "</html>",
        ""])


# -- Markdown --------------------------------------------------------------------------
def fenced(text, indent=""):
    """`text` in a code fence longer than any backtick run inside it, so it cannot close it."""
    text = clean(text).rstrip()
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    lines = [fence, *text.splitlines(), fence]
    return "\n".join(indent + line for line in lines)


def md_text(text):
    """Untrusted text for running Markdown (headings, list items), specials escaped.

    An underscore is escaped only at a word's edge (where it could start emphasis), so
    names such as 01_attention stay readable in a terminal.
    """
    text = clean(text).replace("\n", " ")
    text = re.sub(r"([\\`*\[\]<>|&~!#])", r"\\\1", text)
    return re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", text)


def code_span(text):
    """`text` as inline code, with a backtick run longer than any inside it."""
    text = clean(text).replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _test_markdown(test, ungradable, language):
    line = messages.text("feedback.test_line", language, test=code_span(test.grade_id),
                         points=number(test.points), max_points=number(test.max_points),
                         status=status_label(test.status, language))
    lines = [f"- {line}"]
    if ungradable:
        return lines
    detail = test.output if test.passed else test.message
    if detail.strip():
        lines += ["", fenced(detail, indent="  "), ""]
    return lines


def render_markdown(result):
    """The same feedback as Markdown, readable as plain text too."""
    language = result.language
    text = lambda key, **fields: messages.text(key, language, **fields)  # noqa: E731
    ungradable = is_ungradable(result)
    score = f"**{number(result.score)} / {number(result.max_score)}**"
    title = text("feedback.title", assignment=md_text(result.assignment),
                 student=md_text(result.student))
    lines = [f"# {title}", "", text("feedback.score", score=score), ""]
    if result.status == "error":
        lines += [f"## {text(_error_heading(result))}", "", fenced(result.error), ""]
    lines += [f"## {text('feedback.tests')}", ""]
    for test in result.tests:
        lines += _test_markdown(test, ungradable, language)
    if _errors(result):
        lines += ["", f"## {text('feedback.errors')}", "", text("feedback.errors_explained"), ""]
        for problem in _errors(result):
            lines += [f"- {md_text(messages.where(problem.get('cell', ''), language))}", "",
                      fenced(problem.get("message", ""), indent="  "), ""]
    return "\n".join(lines).rstrip() + "\n"
