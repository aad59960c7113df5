"""Autograding for instructors: `python -m autograde <command>` from the repository root.

The path of `python -m autograde grade` from a notebook file to a gradebook row, in the
order the modules run (one line per module, its name first):

    __main__   the command line: `grade` takes the course's lock and calls batch
    batch      the class: its jobs (submitted/<student>/<assignment>/), which are up to date
    course     the release, made again where it is missing (nbgrader generate_assignment)
    engine     each chapter's Assignment, built once from its source notebook and handed to
               the worker processes, each of which holds a Grader
    notebook   the submission read once (by batch where a saved result may still hold, else
               by the worker), validated and planned into steps
    forbids    the steps' source read for forbidden shortcuts (no student code runs)
    remote     the student's process started, each step sent to it, each call relayed
    protocol   the requests between the two, declared once and checked on both sides
    wire       the messages themselves: JSON and raw tensor bytes, never pickle
    sandbox    in the student's process (bubblewrap): their code run, values sent back
    results    the verdicts: a TestResult per test cell in a NotebookResult, which the
               worker hands back to batch as it is, with the student's answers
    record     the NotebookResult written into nbgrader's gradebook (its Autograde), once,
               then kept as JSON by batch (for a resumed run, feedback and report)
    exports    grades.csv from the gradebook, tests.csv from the results in hand

Around it: paths (every folder's place), kit (the student's copy of the checks), translate
(the student notebook's markdown in another language, from the book's catalogues), trees
(removing what a submission left), feedback and report (the commands of the same names,
from the saved results). Before and after it, the learning platforms: collect (a
platform's bulk download into submitted/, before `grade`), roster (who the students are
on the platform), lms_export (the gradebook as a platform's import file, after `grade`),
gradescope (the same pipeline packed as Gradescope's autograder.zip), platform_commands
(those commands' command-line wiring), class_calendar (which chapters the class edition
publishes). The checks are the package chapters.checks, which the engine
imports (paths.CHECKS_PACKAGE) and runs here, in the grader: of it, the student's process
holds only operations.py and nested.py, which judge nothing. The words of feedback, report
and the grader's verdicts: messages (templates, translated in
locales/<language>/LC_MESSAGES/grader.po, chosen by the submitted notebook's language);
the checks' own words come from their catalogue, checks.po, which checks_catalogue extracts
from each checks module's MESSAGES and compiles for the grader and the kit.
"""
