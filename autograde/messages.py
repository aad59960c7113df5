"""The grader's own words to students and instructors, in one place, in every language.

Every sentence that feedback, report and the grader's verdicts (a timeout, a crash, a
notebook that cannot be read) put before a person is a template with named fields in
MESSAGES below; code writes `text(key, language, **fields)`. The English is the catalogue's
message id: `make locales` extracts the templates (pybabel, the `_()` marks below; `_p()`
gives one its context, where the same English is translated otherwise elsewhere) into
locales/<language>/LC_MESSAGES/grader.po, where they are translated; at run time the .po is
compiled in memory and read with the standard library's gettext (`translations`), so no
compiled file can go stale. A template with no translation (or only a fuzzy one) falls back
to the English, as gettext does. The language of a submission is its notebook's metadata
`course.language`, which `release --lang` writes (autograde.notebook.language).

Fields hold what is not prose: names, numbers, code, shapes, and text quoted from the
student's code or from the checks (translated by the checks' own catalogue). Values that are
code stay as they are in every language.
"""
import functools
import gettext
import io
import re

from autograde.paths import REPO

ENGLISH = "en"
DOMAIN = "grader"
LOCALES = REPO / "locales"


def _(english):
    """Marks a template for extraction (pybabel extract -k _); returns it unchanged."""
    return english


class Contextual(str):
    """A template whose English is said otherwise elsewhere, with its gettext context
    (`.context`): the same English, translated apart (report's column "passed", a count,
    and a test's status "passed")."""

    def __new__(cls, context, english):
        made = super().__new__(cls, english)
        made.context = context
        return made


def _p(context, english):
    """Marks a template for extraction with its context (pybabel extract -k _p:1c,2)."""
    return Contextual(context, english)


MESSAGES = {
    # -- feedback: one student's page (autograde.feedback) ---------------------------------
    "status.passed": _("passed"),
    "status.failed": _("failed"),
    "status.timeout": _("timed out"),
    "status.crash": _("crashed"),
    "status.protocol": _("grader error"),
    "status.error": _("not graded"),
    "feedback.title": _("{assignment} — feedback for {student}"),
    "feedback.for": _("Feedback for {student}"),
    "feedback.score": _("Score: {score}"),
    "feedback.tests": _("Tests"),
    "feedback.column.test": _("Test"),
    "feedback.column.points": _("Points"),
    "feedback.column.status": _("Status"),
    "feedback.column.details": _("Details"),
    "feedback.see_above": _("see above"),
    "feedback.test_line": _("{test}: {points} / {max_points}, {status}"),
    "feedback.errors": _("Errors in your code"),
    "feedback.errors_explained": _("These statements of your solution cells raised an error "
                                   "when the grader ran them; the tests that use them may fail "
                                   "because of it."),
    "feedback.ungradable": _("Your submission could not be graded"),
    "feedback.not_recorded": _("Your grade could not be recorded yet (your instructor will "
                               "see to it)"),
    # -- the grader's verdicts on the student's process (autograde.engine, remote) --------
    "fault.timeout": _("Timed out: {reason}. Each test may take {call_seconds} s and the "
                       "notebook {notebook_seconds} s."),
    "fault.crash": _("Your code crashed the grader's process for it: {reason}."),
    "fault.protocol": _("Your code broke the grader's protocol: {reason}."),
    "fault.notebook_time_ran_out": _("the notebook's time limit ran out"),
    "fault.test_time_ran_out": _("the test cell's time limit ran out"),
    "fault.not_loaded": _("the student's code could not be loaded"),
    "fault.no_answer": _("no answer within {seconds} s (an infinite loop, or far too slow)"),
    "fault.no_answer_test_left": _("no answer within {seconds} s, what was left of the test "
                                   "cell's time limit (an infinite loop, or far too slow)"),
    "fault.no_answer_notebook_left": _("no answer within {seconds} s, what was left of the "
                                       "notebook's time limit (an infinite loop, or far too "
                                       "slow)"),
    "fault.cut_short": _("no complete answer within {seconds} s (a message cut short, or far "
                         "too slow)"),
    "fault.died": _("the student's process died (a crash, os._exit, or a memory or process "
                    "limit): {error}"),
    "fault.malformed_error": _("malformed error"),
    "failure.in_your_code": _("In your code:"),
    # -- an exercise written with what it forbids (autograde.forbids.verdicts) -------------
    "forbid.named": _("{message} (in your code: {where}: {code})"),
    "forbid.could_hide": _("{exercise}'s tests need it written without {label}, and your code "
                           "does what could hide such a call from the checks ({listed}{more}): "
                           "no points for them. The checks run in the grader: a solution needs "
                           "none of this."),
    "forbid.more": _(" and {count} more"),
    "forbid.own_version": _("PyTorch’s own version"),
    "forbid.listed": _("{where}: {what}"),
    "forbid.separator": _("; "),
    # -- why a submission cannot be graded at all (autograde.notebook.SubmissionError) ------
    "submission.missing": _("no notebook named {name} was submitted"),
    "submission.too_big": _("{name} is {size} MB, over the limit of {limit} MB: clear its "
                            "outputs and submit again"),
    "submission.empty": _("{name} is empty (0 bytes)"),
    "submission.grew_over_limit": _("{name} is over the limit of {limit} MB"),
    "submission.nested": _("{name} is not a notebook (its JSON is nested too deeply to read)"),
    "submission.not_json": _("{name} is not a notebook (not valid JSON: {error})"),
    "submission.no_cells": _("{name} is JSON but not a Jupyter notebook (no cell list)"),
    "submission.nbformat": _("{name} has nbformat {version}; expected 4"),
    "submission.surrogate": _("{name} holds text that is not valid Unicode (a lone surrogate) "
                              "in {where}: save it again from Jupyter"),
    "submission.invalid": _("{name} is not a valid nbformat 4 notebook: {problem}"),
    "submission.kernel": _("{name} uses the {kernel} kernel; the course's notebooks are "
                           "Python"),
    "submission.wrong_chapter": _("{name} holds {ours} of {assignment}'s {exercises} exercises "
                                  "(the wrong notebook, or submitted under the wrong chapter?)"),
    "submission.other_chapter": _("{name} holds {ours} of {assignment}'s {exercises} exercises; "
                                  "it holds {other}'s exercises (the wrong notebook, or "
                                  "submitted under the wrong chapter?)"),
    "submission.too_many_statements": _("the notebook's code cells hold more than {limit} "
                                        "statements (lines and semicolons; the chapter's own "
                                        "hold under 1,000): over the grader's limit, not "
                                        "graded"),
    # -- Gradescope's results.json (autograde.gradescope) ----------------------------------
    "gradescope.hidden": _("{hidden} of {cells} test cells hold hidden tests: their results "
                           "show once your instructor publishes the grades."),
    "gradescope.not_graded": _("Your notebook could not be graded: {error}"),
    # -- report: the class's summary (autograde.report) ------------------------------------
    "report.title": _("Grading report"),
    "report.count": _("{submissions} in {assignments}."),
    "report.submission_one": _("{count} submission"),
    "report.submission_many": _("{count} submissions"),
    "report.assignment_one": _("{count} assignment"),
    "report.assignment_many": _("{count} assignments"),
    "report.graded_one": _("{count} graded submission"),
    "report.graded_many": _("{count} graded submissions"),
    "report.student_one": _("{count} student"),
    "report.student_many": _("{count} students"),
    "report.chart_title": _("Pass rate of each test cell"),
    "report.no_chart": _("No graded test cells"),
    "report.panel_title": _("{assignment} ({graded} graded)"),
    "report.panel_title_ungradable": _("{assignment} ({graded} graded, {ungradable} "
                                       "ungradable)"),
    "report.ungradable_left_out": _("{counted}; {ungradable} ungradable, left out: see "
                                    "Needs attention"),
    "report.no_scores": _("Scores: none ({counted})."),
    "report.scores": _("Scores out of {max_score} ({counted}):"),
    "report.column.mean": _("mean"),
    "report.column.median": _("median"),
    "report.column.min": _("min"),
    "report.column.max": _("max"),
    "report.column.full_marks": _("full marks"),
    "report.pass_rates": _("Pass rate of each test cell (graded submissions):"),
    "report.column.test": _("test"),
    "report.column.passed": _p("report.column", "passed"),
    "report.column.rate": _("rate"),
    "report.no_mistakes": _("Most common mistakes: none."),
    "report.mistakes": _("Most common mistakes: failed tests grouped by the first line of "
                         "their diagnosis, with numbers as # and shapes as (…){note}:"),
    "report.rarer_kinds": _(" ({count} rarer kinds not shown)"),
    "report.mistake": _("{count}x, {students}: {pattern}"),
    "report.mistake_language": _("{count}x, {students} ({language}): {pattern}"),
    "report.mistake_tests": _("tests: {tests}"),
    "report.mistake_example": _("e.g. {student}: {line}"),
    "report.no_diagnosis": _("(no diagnosis)"),
    "report.nobody": _("Needs attention: nobody."),
    "report.attention": _("Needs attention ({count}): not graded, a test that timed out, "
                          "crashed or broke the grader's protocol, or code that reaches into "
                          "the checks."),
    "report.reason.ungradable": _("could not be graded"),
    "report.reason.not_recorded": _("graded, not recorded"),
    "report.reason.problem": _("grading problem"),
    "report.reason.suspicious": _("suspicious code"),
    "report.reason.duplicate": _("exercise in several cells"),
    # -- where in a notebook: the grader's labels of cells and lines (where(), below) -------
    "where.cell": _("cell {cell}"),
    "where.cell_line": _("cell {cell}, line {line}"),
    # -- a notebook's problems besides errors (autograde.notebook) -------------------------
    "problem.duplicate": _("the exercise {exercise} is in {count} cells ({cells}): graded "
                           "from the last, as nbgrader does; the others ran as ordinary cells"),
    "problem.cell_limit": _("more than {limit} statements (lines and semicolons) in one cell, "
                            "over the grader's limit: the cell was not run"),
    # -- a student folder without the notebook (autograde.batch.find_jobs) -----------------
    "submission.misnamed": _("no notebook named {name}; found {found} (rename it to {name})"),
    # -- the student's process (autograde.sandbox: sent to it, in the notebook's language) -
    "sandbox.output_limit": _("a result of {size} bytes is over the output limit"),
    # -- what could hide a forbidden call (autograde.forbids.Finding) ----------------------
    "finding.star_import": _("star import from {module} (the names it binds cannot be "
                             "followed)"),
    "finding.imports_name": _("imports {name} from {module}"),
    "finding.names_in_string": _("names {text} in a string"),
    "finding.uses_as_value": _("uses {name} as a value ({code})"),
    "finding.calls_renamed": _("calls {name} under another name ({code})"),
    "finding.calls_computed": _("calls {name} with a computed name ({code})"),
    "finding.module_as_value": _("uses the module {module} as a value ({code})"),
    "finding.uses_which_is": _("uses {code}, which is {path}"),
    "finding.imports": _("imports {module}"),
    "finding.imports_from": _("imports from {module}"),
    "finding.uses": _("uses {code}"),
    "finding.replaces": _("replaces {code} (patches torch)"),
    "finding.calls": _("calls {name}()"),
    # -- Gradescope: which notebook of the upload is graded (autograde.gradescope) ---------
    "gradescope.no_notebook": _("Your submission holds no notebook: upload {wanted}."),
    "gradescope.only_notebook": _("Graded {found} (the only notebook submitted) as "
                                  "{wanted}."),
    "gradescope.several_named": _("Your submission holds {count} notebooks ({names}) and "
                                  "several named {wanted}: submit only {wanted}."),
    "gradescope.none_named": _("Your submission holds {count} notebooks ({names}) and none "
                               "named {wanted}: submit only {wanted}."),
    "gradescope.see_above": _("not graded: see above"),
    # (a problem found in a notebook, where it is: Gradescope's output, the report's)
    "where.problem": _("{where}: {message}"),
    # -- the grader's own failure on one notebook (autograde.batch) ------------------------
    "batch.grader_failed": _("the grader failed on this notebook: {error}"),
    "batch.worker_died": _("the grader's worker process died twice while this notebook was "
                           "being graded"),
    # -- Gradescope: the autograder's own failure (autograde.gradescope) -------------------
    "gradescope.failed": _("The autograder failed on this submission ({error}); your "
                           "instructor can see why in the autograder output. Please tell "
                           "them."),
    # (written into run_autograder, in the class's language: the grader has not started)
    "gradescope.failed_to_start": _("The autograder failed before it could grade this "
                                    "submission. Your instructor can see why in the "
                                    "autograder output; please tell them."),
    # -- what the student's code printed, bounded (autograde.wire.Printed: the sandbox's
    # and the grader's, sent to the student's process with the others, child_messages) ----
    "sandbox.output_dropped": _("[... {count} characters dropped by the output limit ...]"),
    # -- report: who needs attention, and why (autograde.report) ---------------------------
    "report.attention_item": _("{student}: {reason}"),
    "report.reason.test": _("{test}: {status}"),
    # the instructor's flag on a cell (autograde.forbids.flags): its findings, joined by
    # forbid.separator
    "report.suspicious": _("{findings} (the checks run in the grader: a solution needs "
                           "none of this)"),
    # -- a notebook the grader could not read (autograde.engine), a result nbgrader could
    # not record (autograde.batch) ----------------------------------------------------------
    "submission.unreadable": _("{name} could not be read: {error}"),
    "batch.not_recorded": _("nbgrader could not record this result: {error}"),
    # -- what a check meets of the student's objects (autograde.remote: in the language the
    # checks speak, the notebook's) ---------------------------------------------------------
    "remote.cannot_send": _("cannot send an object of type {kind} to the student's process"),
    "remote.gradient_count": _("the student's process returned the wrong number of "
                               "gradients"),
    "remote.gradient_malformed": _("the student's process returned a malformed gradient"),
    "remote.read_only": _("objects of the student's process are read-only here"),
    "remote.malformed_length": _("the student's process sent a malformed length"),
    "remote.stands_for": _("<{kind} in the student's process>"),
    # -- the instructor's commands refusing or noting (autograde.batch, lms_export,
    # platform_commands: in the class's language, paths.class_language) -----------------
    "cli.busy": _("another `grade` is running on {course} (pid {pid}): wait for it to "
                  "finish, then run this again"),
    "cli.stale_release": _("the course's checks changed since these chapters were released "
                           "({changed}): grading now would not judge by the course's checks "
                           "alone (the students' code runs beside the released ones). Release "
                           "them again first: {command}"),
    "cli.stale_chapter": _("{chapter}: {files}"),
    "export.nothing": _("no assignment of the gradebook to export: run `python -m autograde "
                        "grade` first"),
    "export.needs_roster": _("--to {to} needs --roster: {platform} matches rows by its own "
                             "ids, which only the roster knows"),
    "export.not_on_roster": _("{student} is in the gradebook but not on the roster: not "
                              "exported"),
    "export.left_empty": _("{student}/{assignment} left empty: it could not be graded "
                           "({why})"),
    "export.canvas_unmatched": _("{student} has no canvas_user_id, sis_user_id or "
                                 "sis_login_id on the roster: Canvas cannot match that row"),
    "export.moodle_key": _("--to moodle needs a roster column that identifies every student: "
                           "one of {keys} (or name it with --moodle-key)"),
    "export.moodle_unmatched": _("{student} has no {key} on the roster: Moodle cannot match "
                                 "that row"),
    "export.unknown_format": _("unknown format {format}: one of {formats}"),
    "export.bad_column": _("--column {item}: write ASSIGNMENT=TITLE"),
    "export.written": _("{rows} students written to {path}"),
    # -- a platform's download or a roster refused (autograde.collect, autograde.roster: in
    # the class's language, paths.class_language) ------------------------------------------
    "collect.not_zip": _("{path} is not a zip file: {error}"),
    "collect.outside": _("{path}: refusing member {member} (outside the download's folder)"),
    "collect.too_big": _("{path} unpacks to {size} GiB, more than {limit} GiB"),
    "roster.no_student_id": _("{path}: no column named student_id (the header has "
                              "{header})"),
    "roster.empty_header": _p("roster.header", "nothing"),
    "roster.unusable_id": _("{path}, row {row}: student_id {student_id} is not a usable "
                            "folder name (letters, digits, '.', '_', '-')"),
    "roster.twice": _("{path}, row {row}: student_id {student_id} appears twice"),
    # -- the instructor's commands' own summaries (autograde.__main__: in the class's
    # language) ------------------------------------------------------------------------------
    "cli.no_results": _("no results: run `python -m autograde grade` first"),
    "cli.graded": _("{notebooks} notebooks; {errors} could not be graded. Wrote {grades} and "
                    "{tests}."),
    # -- what `collect` did with each file of a download (autograde.collect: in the class's
    # language; the kind of a problem, e.g. no-student, stays as it is) ---------------------
    "collect.problem": _("{kind}: {path}: {message} (left in {folder}/)"),
    "collect.summary": _("{assignment}: {added} added, {updated} updated, {unchanged} "
                         "unchanged{late}; {problems} problems"),
    "collect.late": _(", {count} late ({students})"),
    "collect.not_platform": _("not a file name of {platform}'s download, so it names no "
                              "student"),
    "collect.no_usable_id": _("no usable student id in the file name"),
    "collect.not_on_roster": _("no student on the roster has {column} {key}"),
    "collect.several_on_roster": _("{count} students on the roster have {column} {key} "
                                   "({students})"),
    "collect.no_username": _("no username in {head} (Blackboard writes "
                             "<Assignment>_<username>)"),
    "collect.username_not_on_roster": _("no student on the roster has username "
                                        "{username}{others}"),
    "collect.nor": _(" (nor {usernames})"),
    "collect.any_username": _("{head} may end with any of the usernames {usernames} on the "
                              "roster"),
    "collect.not_notebook": _("{student} handed in {file}, which is not a notebook ({wanted} "
                              "expected)"),
    "collect.other_name": _("{student} handed in a notebook named {file}, not {wanted}: "
                            "rename it to collect it"),
    "collect.older_attempt": _("{student}'s attempt of {older}, superseded by the attempt of "
                               "{newer}"),
    "collect.duplicate": _("{count} files named {wanted} for {student} and no time to tell "
                           "them apart: none collected"),
    # -- what `release` and `gradescope` say of what they wrote (autograde.__main__,
    # platform_commands, gradescope: in the class's language once they are done,
    # paths.class_language counting the languages they write now) --------------------------
    "release.nothing_opened": _("class_calendar has opened no chapter: nothing released"),
    "release.answers": _("{assignment}: {folder} (holds the answers of {chapters} for its lab "
                         "code)"),
    "release.no_answers": _("{assignment}: {folder} (holds no answers)"),
    "release.zip": _("{assignment}: {path}"),
    "release.translated": _("{assignment} ({language}): {folder}"),
    "release.translated_zip": _("{assignment} ({language}): {path}"),
    "release.left_in_english": _("{assignment} ({language}): {folder} ({count} markdown "
                                 "blocks left in English)"),
    "release.kit": _("kit: {path} (the package of the checks, no answers)"),
    "gradescope.no_chapter": _("no chapter named {name}: one of {chapters}"),
    "gradescope.built": _("{assignment}: {path} (upload it as the assignment's autograder; "
                          "base image Ubuntu 22.04)"),
    "gradescope.no_bubblewrap": _("bubblewrap cannot run in this container: the student's "
                                  "code runs with process limits only"),
    "gradescope.score": _("{assignment}: score {score} of {max_score}; wrote {path}"),
}


@functools.lru_cache(maxsize=None)
def translations(language):
    """The gettext catalogue of `language` (gettext.NullTranslations for English, or where
    locales/<language>/LC_MESSAGES/grader.po is missing): the .po compiled in memory by
    Babel and read by the standard library's gettext. Fuzzy entries are left out (Babel's
    write_mo), so they fall back to the English."""
    path = LOCALES / str(language) / "LC_MESSAGES" / f"{DOMAIN}.po"
    if language == ENGLISH or not path.is_file():
        return gettext.NullTranslations()
    # (imported here: only a translated submission needs Babel)
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po
    with open(path, "rb") as file:
        catalogue = read_po(file, locale=str(language))
    compiled = io.BytesIO()
    write_mo(compiled, catalogue)
    compiled.seek(0)
    return gettext.GNUTranslations(compiled)


def supported(language):
    """`language` where the grader has a catalogue for it (or English), else English: the
    value comes from a submitted notebook's metadata, which the student controls."""
    if isinstance(language, str) and re.fullmatch(r"[a-z]{2,3}(_[A-Z]{2})?", language) and \
            (LOCALES / language / "LC_MESSAGES" / f"{DOMAIN}.po").is_file():
        return language
    return ENGLISH


def template(key, language=ENGLISH):
    """The template of `key` in `language` (the English where it has no translation)."""
    english = MESSAGES[key]
    catalogue = translations(language or ENGLISH)
    if isinstance(english, Contextual):
        return catalogue.pgettext(english.context, english)
    return catalogue.gettext(english)


def text(key, language=ENGLISH, /, **fields):
    """The message `key` in `language`, its fields filled in."""
    return template(key, language).format(**fields)


# The grader's label of a step of the plan (autograde.notebook.plan): "cell <grade id or
# number>, line <n>", or "cell <...>" alone. Labels are identifiers too (the student's
# process compiles each step under its label; autograde.forbids and engine read the line
# back): they stay as they are, and are put into words where a person reads them.
LABEL = re.compile(r"cell (?P<cell>.+?)(?:, line (?P<line>\d+))?")


def where(label, language=ENGLISH):
    """The grader's label of a cell or a line (LABEL) in `language`: "cell scores, line 3"
    -> "单元格 scores，第 3 行"; any other text as it is."""
    found = LABEL.fullmatch(str(label))
    if not found:
        return label
    if found["line"] is None:
        return text("where.cell", language, cell=found["cell"])
    return text("where.cell_line", language, cell=found["cell"], line=found["line"])


def problem_message(problem, language=ENGLISH):
    """A notebook's problem (a dict of NotebookResult.problems) as said in `language`: a
    flag's (autograde.forbids.flags) from its findings' templates; any other's message as
    it was written (in the notebook's language), as is a flag saved before flags kept its
    findings."""
    findings = problem.get("findings")
    if not findings:
        return problem.get("message", "")
    try:
        said = [text(f"finding.{finding['key']}", language, **finding["fields"])
                for finding in findings]
    except (KeyError, TypeError, ValueError, IndexError):  # (a result saved otherwise)
        return problem.get("message", "")
    return text("report.suspicious", language,
                findings=text("forbid.separator", language).join(said))


def html_lang(language):
    """The HTML lang attribute of a language: zh_CN -> zh-CN."""
    return str(language or ENGLISH).replace("_", "-")
