"""The class report: <course>/report.md and <course>/report.png from the grading results.

Per assignment: the pass rate of each test cell, the score distribution, the most common
diagnosed mistakes, and every submission that needs the instructor's attention (it could
not be graded, or a test timed out, crashed or broke the grader's protocol).

Diagnoses hold student-controlled text, so report.md shows them only inside indented
code blocks (no Markdown or HTML is interpreted there) with control characters removed
(no escape sequences reach the terminal that prints it).
"""
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from autograde.feedback import clean, code_span, is_ungradable, md_text, number

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
    count: int = 0
    students: set = field(default_factory=set)
    tests: Counter = field(default_factory=Counter)
    example: tuple = ("", "")  # (student, first line) of the first occurrence


@dataclass
class Attention:
    """A submission the instructor must look at, and why."""
    student: str
    reason: str
    message: str


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
    return Summary(assignment, graded, ungradable, tests, passed, _mistakes(graded),
                   _attention(results))


def _mistakes(graded):
    """Failed tests grouped by their diagnosis' normalised first line, most frequent first."""
    groups = {}
    for result in graded:
        for test in result.tests:
            if test.status != "failed":
                continue
            line = first_line(test.message) or "(no diagnosis)"
            mistake = groups.setdefault(normalise(line), Mistake(normalise(line)))
            if not mistake.count:
                mistake.example = (result.student, line)
            mistake.count += 1
            mistake.students.add(result.student)
            mistake.tests[test.grade_id] += 1
    return sorted(groups.values(), key=lambda m: (-m.count, m.pattern))


def _attention(results):
    """Every ungradable submission and every test the grader could not finish."""
    found = []
    for result in sorted(results, key=lambda r: r.student):
        if is_ungradable(result):
            found.append(Attention(result.student, "could not be graded", result.error))
        elif result.status == "error":  # graded, but nbgrader could not record it
            found.append(Attention(result.student, "graded, not recorded", result.error))
        elif result.error:
            found.append(Attention(result.student, "grading problem", result.error))
        for problem in result.problems:
            reason = {"suspicious": "suspicious code",
                      "duplicate": "exercise in several cells"}.get(problem.get("kind"))
            if reason:
                found.append(Attention(result.student, reason,
                                       f"{problem.get('cell', '')}: {problem.get('message', '')}"))
        for test in result.tests:
            if test.status in INFRASTRUCTURE:
                found.append(Attention(result.student, f"{test.grade_id}: {test.status}",
                                       test.message))
    return found


# -- report.md -------------------------------------------------------------------------
def _block(lines):
    """Lines as an indented code block: shown verbatim, nothing interpreted."""
    return ["", *("    " + clean(line).replace("\n", " ") for line in lines)]


def _plural(count, word):
    return f"{count} {word}" + ("" if count == 1 else "s")


def _short(text, limit=EXAMPLE_CHARS):
    text = " ".join(clean(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _table(header, rows):
    """A Markdown table with padded columns, as readable in a terminal as rendered."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    line = lambda row: "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |"
    return [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
            *(line(row) for row in rows)]


def _scores_md(summary):
    scores = summary.scores
    counted = _plural(len(summary.graded), "graded submission")
    if summary.ungradable:
        counted += f"; {len(summary.ungradable)} ungradable, left out: see Needs attention"
    if not scores:
        return [f"Scores: none ({counted})."]
    full = sum(1 for r in summary.graded if r.max_score and r.score >= r.max_score)
    return [f"Scores out of {number(summary.max_score)} ({counted}):", "",
            *_table(["mean", "median", "min", "max", "full marks"],
                    [[f"{statistics.mean(scores):.2f}", number(statistics.median(scores)),
                      number(min(scores)), number(max(scores)), f"{full}/{len(scores)}"]])]


def _pass_rates_md(summary):
    rows = [[code_span(grade_id), f"{summary.passed[grade_id]}/{len(summary.graded)}",
             f"{100 * summary.pass_rate(grade_id):.0f}%"] for grade_id in summary.tests]
    return ["Pass rate of each test cell (graded submissions):", "",
            *_table(["test", "passed", "rate"], rows)]


def _mistakes_md(summary):
    if not summary.mistakes:
        return ["Most common mistakes: none."]
    lines = []
    for mistake in summary.mistakes[:TOP_MISTAKES]:
        tests = ", ".join(f"{name} ({count})" for name, count in mistake.tests.most_common())
        student, line = mistake.example
        lines += [f"{mistake.count}x, {_plural(len(mistake.students), 'student')}: "
                  f"{_short(mistake.pattern)}",
                  f"    tests: {tests}"]
        if line != mistake.pattern:  # an example with its numbers, when it had any
            lines.append(f"    e.g. {_short(student, 60)}: {_short(line)}")
    more = len(summary.mistakes) - TOP_MISTAKES
    note = f" ({more} rarer kinds not shown)" if more > 0 else ""
    return ["Most common mistakes: failed tests grouped by the first line of their",
            f"diagnosis, with numbers as # and shapes as (…){note}:", *_block(lines)]


def _attention_md(summary):
    if not summary.attention:
        return ["Needs attention: nobody."]
    lines = []
    for item in summary.attention:
        lines += [f"{_short(item.student, 60)}: {_short(item.reason, 100)}",
                  f"    {_short(item.message, 2 * EXAMPLE_CHARS)}"]
    return [f"Needs attention ({len(summary.attention)}): not graded, a test that timed out,",
            "crashed or broke the grader's protocol, or code that reaches into the checks.",
            *_block(lines)]


def render_markdown(summaries, image_name="report.png"):
    """report.md's text."""
    total = sum(len(s.graded) + len(s.ungradable) for s in summaries.values())
    lines = ["# Grading report", "",
             f"{_plural(total, 'submission')} in {_plural(len(summaries), 'assignment')}.", "",
             f"![Pass rate of each test cell]({image_name})", ""]
    for summary in summaries.values():
        lines += [f"## {md_text(summary.assignment)}", ""]
        for section in (_scores_md, _pass_rates_md, _mistakes_md, _attention_md):
            lines += [*section(summary), ""]
    return "\n".join(lines).rstrip() + "\n"


# -- report.png ------------------------------------------------------------------------
def render_png(summaries, path):
    """One horizontal bar chart of pass rates per assignment, stacked in one PNG."""
    # the Agg canvas directly: no pyplot state, no GUI backend, safe in any process
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [s for s in summaries.values() if s.tests]
    if not panels:
        return _empty_png(path)
    heights = [max(len(s.tests), 1) for s in panels]
    label_chars = max((len(t) for s in panels for t in s.tests), default=10)
    figure = Figure(figsize=(8 + 0.08 * label_chars, 1.2 + sum(0.35 * h + 0.8 for h in heights)),
                    layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(panels), 1, squeeze=False,
                           gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, summary in zip(axes, panels):
        _pass_rate_panel(ax, summary)
    figure.suptitle("Pass rate of each test cell")
    figure.savefig(path, dpi=100)
    return Path(path)


def _empty_png(path):
    """A small image that says there is nothing to chart (no results, or no test cells)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 1.5))
    FigureCanvasAgg(figure)
    figure.text(0.5, 0.5, "No graded test cells", ha="center", va="center", fontsize=14)
    figure.savefig(path, dpi=100)
    return Path(path)


def _pass_rate_panel(ax, summary):
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
    extra = f", {len(summary.ungradable)} ungradable" if summary.ungradable else ""
    ax.set_title(f"{summary.assignment} ({len(summary.graded)} graded{extra})", loc="left")
    ax.grid(axis="x", alpha=0.3)


def _colour(rate):
    return "#2e7d32" if rate >= 80 else "#f9a825" if rate >= 50 else "#c62828"


def write_report(course_dir, results):
    """Write <course>/report.md and <course>/report.png; returns their paths."""
    course_dir = Path(course_dir)
    course_dir.mkdir(parents=True, exist_ok=True)
    summaries = summarise(results)
    image = render_png(summaries, course_dir / "report.png")
    markdown = course_dir / "report.md"
    markdown.write_text(render_markdown(summaries, image.name), encoding="utf-8")
    return [markdown, image]
