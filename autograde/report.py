"""The class report: <course>/report.md and <course>/report.png from the grading results.

Per assignment: the pass rate of each test cell, the score distribution, the most common
diagnosed mistakes, and every submission that needs the instructor's attention (it could
not be graded, or a test timed out, crashed or broke the grader's protocol).

The report's own sentences are templates of autograde.messages, in the language asked for
(`report --lang`, English by default: the instructor's). What it quotes of each student (a
diagnosis, why a submission needs attention) is as that student read it, in their notebook's
language; mistakes are grouped per language, and marked with it when the class has several.

Diagnoses hold student-controlled text, so report.md shows them only inside indented
code blocks (no Markdown or HTML is interpreted there) with control characters removed
(no escape sequences reach the terminal that prints it).
"""
import re
import statistics
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autograde import messages
from autograde.feedback import clean, code_span, is_ungradable, md_text, number, status_label

INFRASTRUCTURE = ("timeout", "crash", "protocol")  # the grader's fault or a limit, not a mistake
TOP_MISTAKES = 10
EXAMPLE_CHARS = 300

# Numbers in a diagnosis vary from student to student ("largest error 0.31" / "0.5",
# "got (2, 4, 3)" / "got (2, 3)"); names such as float32 or d_k keep theirs.
# (A number may end a sentence: "error 0.31." still matches.)
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?!\w)(?!\.\d)")
# A tuple of numbers, "(2, 3)" or "(2,)", or a list "[2, 3]"; "exp(88.7)" stays "exp(#)".
_TUPLE = re.compile(r"\(\s*#\s*,(?:\s*#\s*,)*(?:\s*#)?\s*\)")
_LIST = re.compile(r"\[\s*#(?:\s*,\s*#)*\s*\]")


def first_line(message):
    """The first non-empty line of a message (control characters removed)."""
    for line in clean(message).splitlines():
        if line.strip():
            return line.strip()
    return ""


def normalise(line):
    """A diagnosis line with its numbers replaced by # and its shapes by (…) or […]."""
    line = _NUMBER.sub("#", line)
    return _LIST.sub("[…]", _TUPLE.sub("(…)", line))


@dataclass
class Mistake:
    """Failed tests whose diagnoses share a normalised first line."""
    pattern: str
    language: str = messages.ENGLISH  # of the submissions' notebooks (their diagnoses')
    count: int = 0
    students: set = field(default_factory=set)
    tests: Counter = field(default_factory=Counter)
    example: tuple = ("", "")  # (student, first line) of the first occurrence


@dataclass
class Attention:
    """A submission the instructor must look at, and why: the template `reason` of
    autograde.messages with its `fields` (a test's status put into words as the report
    says it), and what the student read (`message`, in their notebook's language) or the
    problem found in their notebook (`problem`, said in the report's language: _said)."""
    student: str
    reason: str   # a key of messages.MESSAGES
    message: str = ""
    fields: dict = field(default_factory=dict)
    problem: dict = None


@dataclass
class Summary:
    """What the report says about one assignment."""
    assignment: str
    graded: list      # NotebookResults that could be graded
    ungradable: list  # NotebookResults of submissions no test could run on
    tests: list       # grade ids, in notebook order
    passed: Counter   # grade id -> submissions that passed it (graded ones only)
    mistakes: list    # Mistakes, most frequent first
    attention: list   # Attentions, by student
    languages: list = field(default_factory=list)  # of the submissions, English first

    @property
    def multilingual(self):
        return len(self.languages) > 1

    @property
    def scores(self):
        return [r.score for r in self.graded]

    @property
    def max_score(self):
        return max((r.max_score for r in self.graded + self.ungradable), default=0.0)

    def pass_rate(self, grade_id):
        return self.passed[grade_id] / len(self.graded) if self.graded else 0.0


def summarise(results):
    """{assignment: Summary} from {(student, assignment): NotebookResult}."""
    by_assignment = defaultdict(list)
    for (_, assignment), result in sorted(results.items()):
        by_assignment[assignment].append(result)
    return {name: _summary(name, group) for name, group in sorted(by_assignment.items())}


def _summary(assignment, results):
    graded = [r for r in results if not is_ungradable(r)]
    ungradable = [r for r in results if is_ungradable(r)]
    tests, passed = [], Counter()
    for result in results:
        for test in result.tests:
            if test.grade_id not in tests:
                tests.append(test.grade_id)
    for result in graded:
        passed.update(t.grade_id for t in result.tests if t.passed)
    languages = sorted({r.language for r in results}, key=lambda l: (l != messages.ENGLISH, l))
    return Summary(assignment, graded, ungradable, tests, passed, _mistakes(graded),
                   _attention(results), languages)


def _mistakes(graded):
    """Failed tests grouped by their diagnosis' normalised first line (and the language it
    is written in), most frequent first."""
    groups = {}
    for result in graded:
        for test in result.tests:
            if test.status != "failed":
                continue
            line = first_line(test.message) or messages.text("report.no_diagnosis",
                                                             result.language)
            mistake = groups.setdefault((normalise(line), result.language),
                                        Mistake(normalise(line), result.language))
            if not mistake.count:
                mistake.example = (result.student, line)
            mistake.count += 1
            mistake.students.add(result.student)
            mistake.tests[test.grade_id] += 1
    return sorted(groups.values(), key=lambda m: (-m.count, m.pattern, m.language))


def _attention(results):
    """Every ungradable submission and every test the grader could not finish."""
    found = []
    for result in sorted(results, key=lambda r: r.student):
        if is_ungradable(result):
            found.append(Attention(result.student, "report.reason.ungradable", result.error))
        elif result.status == "error":  # graded, but nbgrader could not record it
            found.append(Attention(result.student, "report.reason.not_recorded", result.error))
        elif result.error:
            found.append(Attention(result.student, "report.reason.problem", result.error))
        for problem in result.problems:
            reason = {"suspicious": "report.reason.suspicious",
                      "duplicate": "report.reason.duplicate"}.get(problem.get("kind"))
            if reason:
                found.append(Attention(result.student, reason, problem=problem))
        for test in result.tests:
            if test.status in INFRASTRUCTURE:
                found.append(Attention(result.student, "report.reason.test", test.message,
                                       {"test": test.grade_id, "status": test.status}))
    return found


# -- report.md -------------------------------------------------------------------------
def _block(lines):
    """Lines as an indented code block: shown verbatim, nothing interpreted."""
    return ["", *("    " + clean(line).replace("\n", " ") for line in lines)]


def _plural(count, what, language):
    """"1 submission", "2 submissions": the message report.<what>_one or _many."""
    return messages.text(f"report.{what}_{'one' if count == 1 else 'many'}", language,
                         count=count)


def _short(text, limit=EXAMPLE_CHARS):
    text = " ".join(clean(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _width(text):
    """How many columns a terminal gives `text`: two for a wide (Chinese) character."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in str(text))


def _table(header, rows):
    """A Markdown table with padded columns, as readable in a terminal as rendered."""
    widths = [max(_width(row[i]) for row in [header, *rows]) for i in range(len(header))]
    pad = lambda cell, width: str(cell) + " " * (width - _width(cell))  # noqa: E731
    line = lambda row: "| " + " | ".join(pad(c, w) for c, w in zip(row, widths)) + " |"
    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
            *(line(row) for row in rows)]


def _wrapped(text, width=88):
    """A sentence of the report as lines of at most `width` characters where it has spaces
    (a Chinese sentence, without any, stays one line)."""
    lines = [""]
    for word in text.split(" "):
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}" if lines[-1] else word
    return lines


def _scores_md(summary, language):
    text = lambda key, **fields: messages.text(key, language, **fields)  # noqa: E731
    scores = summary.scores
    counted = _plural(len(summary.graded), "graded", language)
    if summary.ungradable:
        counted = text("report.ungradable_left_out", counted=counted,
                       ungradable=len(summary.ungradable))
    if not scores:
        return [text("report.no_scores", counted=counted)]
    full = sum(1 for r in summary.graded if r.max_score and r.score >= r.max_score)
    columns = [text(f"report.column.{c}") for c in ("mean", "median", "min", "max",
                                                     "full_marks")]
    return [text("report.scores", max_score=number(summary.max_score), counted=counted), "",
            *_table(columns,
                    [[f"{statistics.mean(scores):.2f}", number(statistics.median(scores)),
                      number(min(scores)), number(max(scores)), f"{full}/{len(scores)}"]])]


def _pass_rates_md(summary, language):
    rows = [[code_span(grade_id), f"{summary.passed[grade_id]}/{len(summary.graded)}",
             f"{100 * summary.pass_rate(grade_id):.0f}%"] for grade_id in summary.tests]
    columns = [messages.text(f"report.column.{c}", language) for c in ("test", "passed", "rate")]
    return [messages.text("report.pass_rates", language), "", *_table(columns, rows)]


def _mistakes_md(summary, language):
    text = lambda key, **fields: messages.text(key, language, **fields)  # noqa: E731
    if not summary.mistakes:
        return [text("report.no_mistakes")]
    lines = []
    for mistake in summary.mistakes[:TOP_MISTAKES]:
        tests = ", ".join(f"{name} ({count})" for name, count in mistake.tests.most_common())
        student, line = mistake.example
        fields = dict(count=mistake.count, pattern=_short(mistake.pattern),
                      students=_plural(len(mistake.students), "student", language))
        lines += [text("report.mistake_language", language=mistake.language, **fields)
                  if summary.multilingual else text("report.mistake", **fields),
                  "    " + text("report.mistake_tests", tests=tests)]
        if line != mistake.pattern:  # an example with its numbers, when it had any
            lines.append("    " + text("report.mistake_example", student=_short(student, 60),
                                       line=_short(line)))
    more = len(summary.mistakes) - TOP_MISTAKES
    note = text("report.rarer_kinds", count=more) if more > 0 else ""
    return [*_wrapped(text("report.mistakes", note=note), 80), *_block(lines)]


def _attention_reason(item, language):
    """An Attention's reason as the report says it in `language` (a test's status too)."""
    fields = dict(item.fields)
    if "status" in fields:
        fields["status"] = status_label(fields["status"], language)
    return messages.text(item.reason, language, **fields)


def _said(item, language):
    """What an Attention quotes: the student's message as they read it, or the problem
    where in their notebook, said in `language` (a flag's findings too: the instructor's)."""
    if item.problem is None:
        return item.message
    return messages.text("where.problem", language,
                         where=messages.where(item.problem.get("cell", ""), language),
                         message=messages.problem_message(item.problem, language))


def _attention_md(summary, language):
    if not summary.attention:
        return [messages.text("report.nobody", language)]
    lines = []
    for item in summary.attention:
        lines += [messages.text("report.attention_item", language,
                                student=_short(item.student, 60),
                                reason=_short(_attention_reason(item, language), 100)),
                  f"    {_short(_said(item, language), 2 * EXAMPLE_CHARS)}"]
    return [*_wrapped(messages.text("report.attention", language,
                                    count=len(summary.attention)), 80), *_block(lines)]


def render_markdown(summaries, image_name="report.png", language=messages.ENGLISH):
    """report.md's text, its own sentences in `language`."""
    text = lambda key, **fields: messages.text(key, language, **fields)  # noqa: E731
    total = sum(len(s.graded) + len(s.ungradable) for s in summaries.values())
    count = text("report.count", submissions=_plural(total, "submission", language),
                 assignments=_plural(len(summaries), "assignment", language))
    lines = [f"# {text('report.title')}", "", count, "",
             f"![{text('report.chart_title')}]({image_name})", ""]
    for summary in summaries.values():
        lines += [f"## {md_text(summary.assignment)}", ""]
        for section in (_scores_md, _pass_rates_md, _mistakes_md, _attention_md):
            lines += [*section(summary, language), ""]
    return "\n".join(lines).rstrip() + "\n"


# -- report.png ------------------------------------------------------------------------
# A report in a language that Latin fonts lack draws its labels with the CJK font that the
# Chinese edition uses (Debian's fonts-noto-cjk, .ci/run), DejaVu Sans first for the rest
CJK_FONT = "Noto Sans CJK SC"


def _cjk_fonts():
    """matplotlib's font families for a Chinese report: the CJK font added to its font list
    where its cache predates the font's installation (matplotlib lists the fonts it found
    once, when it first ran)."""
    from matplotlib import font_manager
    if CJK_FONT not in {font.name for font in font_manager.fontManager.ttflist}:
        for path in font_manager.findSystemFonts():
            if Path(path).name.startswith("NotoSansCJK"):
                font_manager.fontManager.addfont(path)
    return ["DejaVu Sans", CJK_FONT]


def render_png(summaries, path, language=messages.ENGLISH):
    """One horizontal bar chart of pass rates per assignment, stacked in one PNG."""
    import matplotlib
    fonts = {} if language == messages.ENGLISH else {"font.family": _cjk_fonts()}
    with matplotlib.rc_context(fonts):
        return _render_png(summaries, path, language)


def _render_png(summaries, path, language):
    # the Agg canvas directly: no pyplot state, no GUI backend, safe in any process
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [s for s in summaries.values() if s.tests]
    if not panels:
        return _empty_png(path, language)
    heights = [max(len(s.tests), 1) for s in panels]
    label_chars = max((len(t) for s in panels for t in s.tests), default=10)
    figure = Figure(figsize=(8 + 0.08 * label_chars, 1.2 + sum(0.35 * h + 0.8 for h in heights)),
                    layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(panels), 1, squeeze=False,
                           gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, summary in zip(axes, panels):
        _pass_rate_panel(ax, summary, language)
    figure.suptitle(messages.text("report.chart_title", language))
    figure.savefig(path, dpi=100)
    return Path(path)


def _empty_png(path, language):
    """A small image that says there is nothing to chart (no results, or no test cells)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 1.5))
    FigureCanvasAgg(figure)
    figure.text(0.5, 0.5, messages.text("report.no_chart", language), ha="center",
                va="center", fontsize=14)
    figure.savefig(path, dpi=100)
    return Path(path)


def _pass_rate_panel(ax, summary, language):
    names = summary.tests
    rates = [100 * summary.pass_rate(name) for name in names]
    positions = range(len(names))
    ax.barh(positions, rates, color=[_colour(r) for r in rates])
    ax.set_yticks(list(positions), names)
    ax.invert_yaxis()  # notebook order, top to bottom
    ax.set_xlim(0, 115)  # room for the labels right of a full bar
    ax.set_xticks(range(0, 101, 25), [f"{x}%" for x in range(0, 101, 25)])
    for y, (name, rate) in enumerate(zip(names, rates)):
        ax.text(rate + 1, y, f"{summary.passed[name]}/{len(summary.graded)}", va="center",
                fontsize=9)
    fields = dict(assignment=summary.assignment, graded=len(summary.graded),
                  ungradable=len(summary.ungradable))
    ax.set_title(messages.text("report.panel_title_ungradable" if summary.ungradable
                               else "report.panel_title", language, **fields), loc="left")
    ax.grid(axis="x", alpha=0.3)


def _colour(rate):
    return "#2e7d32" if rate >= 80 else "#f9a825" if rate >= 50 else "#c62828"


def write_report(course_dir, results, language=messages.ENGLISH):
    """Write <course>/report.md and <course>/report.png, their own sentences in `language`;
    returns their paths."""
    course_dir = Path(course_dir)
    course_dir.mkdir(parents=True, exist_ok=True)
    summaries = summarise(results)
    image = render_png(summaries, course_dir / "report.png", language)
    markdown = course_dir / "report.md"
    markdown.write_text(render_markdown(summaries, image.name, language), encoding="utf-8")
    return [markdown, image]
