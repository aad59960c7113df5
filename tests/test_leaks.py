"""Nothing a student can reach holds an answer: every byte of both editions of the built
book (pages, _sources, searchindex, every download, zip, wheel and notebook in them), of
the released chapters and of the checks package is searched for

  - the code of every solution cell (its non-trivial lines, whitespace removed), and of
    every function of `solutions` that answers an exercise;
  - every call of a hidden test (its whole statement, whitespace removed);
  - the grader's own checks code: every line of chapters/checks/ that the kit's copy lacks
    (the @reference bodies, which compute expected outputs, and grader-only modules such
    as formulas.py, which computes each exercise's formula step by step).

Chapter N's material may hold answers of earlier chapters only (chapter 5's lab runs the
model of chapters 1-4); the self-study edition's own chapter page shows that chapter's
solutions, folded (that is the edition); nothing else may hold any, and nothing may hold
a hidden test. A line the course shows anyway (in a given cell or in the text of the same
or an earlier chapter) is no secret and is not searched for.

`make test` builds both editions and the release before running this.
"""
import ast
import html
import io
import json
import re
import tokenize
import zipfile
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from autograde import course, kit

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "_build"
# the English self-study and class editions, and both in Chinese (issue 24: the same pages,
# their prose translated; `make test` builds all four)
SITES = {"self-study": BUILD / "html", "class": BUILD / "class" / "_build" / "html",
         "zh_CN": BUILD / "zh_CN" / "_build" / "html",
         "zh_CN-class": BUILD / "zh_CN-class" / "_build" / "html"}
# the editions with no solution code at all, not even on a chapter's own page
CLASS_EDITIONS = {"class", "zh_CN-class"}
RELEASE = BUILD / "course" / "release"
# the student versions in each other language, by the site of their edition (`make test`
# releases them with the English ones: python -m autograde release --lang zh_CN)
RELEASES = {"self-study": RELEASE, "class": RELEASE, "zh_CN": BUILD / "course" / "release-zh_CN",
            "zh_CN-class": BUILD / "course" / "release-zh_CN"}
WHEELS = BUILD / "course" / "kit"
MIN_LENGTH = 20  # characters of code, whitespace removed: shorter lines say too little
# names, dots, commas, = and : only (`return output, weights`): no computation to give away
TRIVIAL = re.compile(r"[\w.,=:]*")
CHAPTER = re.compile(r"(?<![0-9])(0[1-9])_[a-z]+")
SKIPPED = {".png", ".jpg", ".jpeg", ".gif", ".ico", ".woff", ".woff2", ".ttf", ".eot"}


def squash(text):
    return re.sub(r"\s+", "", text)


def code_lines(code):
    """The squashed lines of `code` without its comments, each joined from its tokens."""
    lines = {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {squash(re.sub(r"#.*", "", line)) for line in code.splitlines()}
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER)
    for token in tokens:
        if token.type not in skip:
            lines.setdefault(token.start[0], []).append(token.string)
    return {squash("".join(parts)) for parts in lines.values()}


def statements(code):
    """The squashed source of each top-level statement of `code`."""
    return {squash(ast.get_source_segment(code, node)) for node in ast.parse(code).body}


def _cells(assignment):
    nb = json.loads((course.CHAPTERS / f"{assignment}.ipynb").read_text())
    return [(c["cell_type"], c.get("metadata", {}).get("nbgrader", {}), "".join(c["source"]))
            for c in nb["cells"]]


def chapter_number(assignment):
    return int(assignment[:2])


def given_text(upto):
    """Squashed text of what chapters 1..upto show anyway: prose, given cells, visible
    tests, the skeletons of the exercises, and the lab code a chapter ships that answers
    no exercise (chapter 5's diversity_lab)."""
    parts = []
    topics = {a.split("_", 1)[1] for a in course.assignments()}
    for assignment in course.assignments():
        if chapter_number(assignment) > upto:
            continue
        for package, modules in course.EXTRA_SHIPPED.get(assignment, {}).items():
            parts += [(REPO / package / f"{m}.py").read_text() for m in modules
                      if m not in topics]
        for kind, meta, source in _cells(assignment):
            if meta.get("solution"):  # the skeleton: signature and docstring
                parts.append(kit.SOLUTION.sub("", source))
            else:
                parts.append(kit.visible_part(source) if meta.get("grade") else source)
    return squash("\n".join(parts))


def _solution_names(assignment):
    names = set()
    for kind, meta, source in _cells(assignment):
        if meta.get("solution"):
            tree = ast.parse(TransformerManager().transform_cell(kit.solution_code(source)))
            names |= {n.name for n in tree.body
                      if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def _package_answers(assignment):
    """Code of the `solutions` functions and classes that answer chapter `assignment`."""
    path = REPO / "solutions" / f"{assignment.split('_', 1)[1]}.py"
    if not path.exists():
        return []
    text = path.read_text()
    names = _solution_names(assignment)
    found = []
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            found.append(ast.get_source_segment(text, node))
    return found


GRADER_ONLY = 99  # the "chapter" of the grader's checks code: no reachable file may hold it


def grader_only_lines():
    """The squashed lines of chapters/checks/ that the kit removes: of the @reference bodies
    (kit.kit_source) and of the modules no chapter's kit ships (formulas.py)."""
    shipped = set().union(*(course.checks_modules(a, kit_form=True)
                            for a in course.assignments()))
    full, kept = set(), []
    for path in sorted(course.CHECKS.glob("*.py")):
        text = path.read_text()
        full |= code_lines(text)
        if path.stem in shipped:
            kept.append(squash(kit.kit_source(text, str(path))))
    kept = "\n".join(kept)
    # (a line that the kit holds anyway, whole or inside a longer line, is no secret)
    return {line for line in full if line not in kept}


def needles():
    """{squashed line: (chapter number, what it is)}: the answers, the hidden tests and the
    grader-only checks code."""
    found = {}
    for assignment in course.assignments():
        number = chapter_number(assignment)
        given = given_text(number)
        answers = [kit.solution_code(s) for k, m, s in _cells(assignment)
                   if m.get("solution") and not m.get("grade")]
        hidden = [block for k, m, s in _cells(assignment) if m.get("grade")
                  for block in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS",
                                          s, re.S)]
        for code, what in ([(c, "solution") for c in answers]
                           + [(c, "solutions package") for c in _package_answers(assignment)]
                           + [(c, "hidden test") for c in hidden]):
            # a hidden test is searched for call by call, an answer line by line
            pieces = statements(code) if what == "hidden test" else code_lines(code)
            for line in pieces:
                # docstrings and messages are prose; a line shown anyway is no secret
                if len(line) >= MIN_LENGTH and line not in given and line[:1] not in "\"'" \
                        and not TRIVIAL.fullmatch(line):
                    found.setdefault(line, (number, what, assignment))
    shown = given_text(max(chapter_number(a) for a in course.assignments()))
    # the reference package's lines are searched for as their chapter's answers (above)
    shown += squash("".join((REPO / "solutions").joinpath(p).read_text()
                            for p in sorted(o.name for o in (REPO / "solutions").glob("*.py"))))
    # last: a line that is also an answer keeps its chapter (its own page may show it)
    for line in grader_only_lines():  # (a line some chapter shows anyway is no secret)
        if len(line) >= MIN_LENGTH and line[:1] not in "\"'" and not TRIVIAL.fullmatch(line) \
                and line not in shown:
            found.setdefault(line, (GRADER_ONLY, "grader-only checks code", "checks"))
    return found


def _text(name, data):
    if Path(name).suffix in SKIPPED:
        return ""
    text = data.decode("utf-8", errors="ignore")
    if name.endswith((".html", ".htm")):
        text = html.unescape(re.sub(r"<[^>]+>", "", text))
    return squash(text)


def artifacts(path, name=None):
    """[(name, squashed text)] of a file, recursing into zips (.zip, .whl, .npz)."""
    name = name or str(path)
    data = path.read_bytes() if isinstance(path, Path) else path
    if zipfile.is_zipfile(io.BytesIO(data)) and Path(name).suffix in (".zip", ".whl", ".npz"):
        found = []
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                found += artifacts(archive.read(member), f"{name}!{member}")
        return found
    return [(name, _text(name, data))]


def owner(name):
    """The chapter number a reachable file belongs to (a chapter's name in its path, not
    inside an archive: the wheel of all chapters belongs to none), else 0."""
    match = CHAPTER.search(name.split("!")[0])
    return int(match.group(1)) if match else 0


def leaks(files, found, own_chapter_page=None):
    """[(file, chapter of the answer, what, line)] for each needle in a file that may not
    hold it. own_chapter_page(name) -> True where a chapter's own solutions are the point."""
    hits = []
    for name, text in files:
        where = owner(name)
        for line, (chapter, what, assignment) in found.items():
            allowed = what != "hidden test" and (
                chapter < where or (chapter == where and own_chapter_page
                                    and own_chapter_page(name)))
            if not allowed and line in text:
                hits.append((name, assignment, what, line))
    return hits


@pytest.fixture(scope="module")
def found():
    return needles()


def test_there_is_something_to_find(found):
    """Every chapter has answers and hidden tests to search for: the scan is not vacuous."""
    for assignment in course.assignments():
        kinds = {what for chapter, what, a in found.values() if a == assignment}
        assert {"solution", "hidden test"} <= kinds, (assignment, kinds)
        assert sum(a == assignment for _, _, a in found.values()) >= 8, assignment
    grader = [line for line, (_, _, a) in found.items() if a == "checks"]
    assert len(grader) >= 100, len(grader)
    # formulas.py's steps (chapter 1's answer, step by step) are among them
    assert "x[\"query\"]@x[\"key\"].transpose(-2,-1)" in "".join(grader)


def test_the_scan_finds_a_planted_answer(found, tmp_path):
    line, (chapter, what, assignment) = next((k, v) for k, v in found.items()
                                             if v[1] == "solution")
    page = f"<pre><span>{html.escape(line)}</span></pre>".encode()
    archive = tmp_path / "00_intro.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("notes/page.html", page)
    assert leaks(artifacts(archive), found)
    later = tmp_path / f"0{chapter + 1}_later.html"
    later.write_bytes(page)
    assert not leaks(artifacts(later), found)  # a later chapter may hold it


def _site_files(site):
    assert (site / "index.html").is_file(), f"{site} is not built: run `make test`"
    files = []
    for path in sorted(site.rglob("*")):
        if path.is_file():
            files += artifacts(path, str(path.relative_to(site)))
    return files


@pytest.mark.parametrize("edition", sorted(SITES))
def test_the_built_book_holds_no_answer(found, edition):
    files = _site_files(SITES[edition])
    assert any(name.startswith("_sources/") and ".ipynb" in name for name, _ in files)
    assert any(name.endswith(".whl!checks/common.py") for name, _ in files)
    if edition not in CLASS_EDITIONS:  # the folded solutions of a chapter, on its own page
        def own(name):
            return bool(re.fullmatch(r"chapters/0[1-9]_[a-z]+\.html", name))
    else:
        own = None
    assert leaks(files, found, own) == []


def test_the_release_and_the_kit_hold_no_answer(found):
    files = []
    released = sorted({path for folder in RELEASES.values() for path in folder.rglob("*")})
    assert any(RELEASES["zh_CN"] in path.parents for path in released)
    for path in released + sorted(WHEELS.glob("*.whl")):
        if path.is_file():
            files += artifacts(path, str(path.relative_to(BUILD)))
    assert len({owner(n) for n, _ in files}) == len(course.assignments()) + 1
    assert leaks(files, found) == []


def test_downloads_of_pages_are_the_student_notebooks():
    """A chapter page's ".ipynb" download (_sources) is the student version, in every
    edition (in its language): no solution code, no hidden test, nbgrader's locked test
    cells intact."""
    for edition, site in SITES.items():
        for assignment in course.assignments():
            (path,) = [p for p in (site / "_sources" / "chapters").glob(f"{assignment}.ipynb*")]
            student = (RELEASES[edition] / assignment / f"{assignment}.ipynb").read_bytes()
            assert path.read_bytes() == student
            assert b"BEGIN HIDDEN TESTS" not in student and b"BEGIN SOLUTION" not in student


def test_launch_buttons_open_the_student_branch(found, tmp_path):
    """Every chapter page's launch buttons (Binder, JupyterHub, Colab), in every edition,
    open chapters/<chapter>.ipynb on the branch of _config.yml, under the edition's root
    for another language (zh_CN/chapters/<chapter>.ipynb); that branch's tree
    (`make student-branch`) holds there the student version in the page's language, and no
    answer anywhere."""
    import yaml

    config = yaml.safe_load((REPO / "_config.yml").read_text())
    branch = config["repository"]["branch"]
    roots = config["sphinx"]["config"]["course_language_editions"]
    tree = course.student_branch(BUILD / "course", tmp_path / "student")
    for edition, site in SITES.items():
        root = roots.get(edition.removesuffix("-class"), "")  # (the edition's language)
        for assignment in course.assignments():
            page = (site / "chapters" / f"{assignment}.html").read_text()
            links = re.findall(r'href="(https://[^"]*(?:binder|/hub/|colab)[^"]*)"', page)
            assert len(links) == 3, links
            notebook = f"{root}chapters/{assignment}.ipynb"
            for link in links:
                assert branch in link and re.search(rf"[=/]{re.escape(notebook)}\b",
                                                    html.unescape(link)), (edition, link)
            student = (RELEASES[edition] / assignment / f"{assignment}.ipynb").read_bytes()
            assert (tree / notebook).read_bytes() == student
    files = []
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            files += artifacts(path, str(path.relative_to(tree)))
    assert leaks(files, found) == []
