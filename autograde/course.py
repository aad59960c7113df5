"""The nbgrader course directory: source notebooks in, student versions out.

nbgrader expects `<course>/source/<assignment>/<notebook>.ipynb`; the course keeps each
chapter as `chapters/<assignment>.ipynb` (the single source), so `prepare_source` copies
each chapter there with the files its student needs beside it, and `release` runs
nbgrader's own generate_assignment on it.
"""
import ast
import json
import os
import re
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path

import yaml
from IPython.core.inputtransformer2 import TransformerManager

from autograde import kit
from autograde.notebook import PARSING, parse
from autograde.paths import CHAPTERS, CHECKS, REPO, RELEASE, SOURCE, release_dir

# The checks package beside every notebook ships in part: its __init__.py, common.py and
# the modules the chapter's notebook imports (checks_modules), so that a chapter's
# download does not hand out the checks, hence the expected behaviour, of the others.
ALWAYS_CHECKS = ["__init__", "common"]
# The chapters that need part of a package from the repository root too:
# {assignment: {package: [module, ...]}}.
# Chapter 5's experiments use the reference package's chapters 1-4 and its lab (task,
# model, training loop), so its release reveals chapters 1-4; never solutions/diversity.py,
# which holds the answers to chapter 5's own exercises.
EXTRA_SHIPPED = {"05_diversity": {"solutions": ["_checks", "attention", "heads", "masks", "mha",
                                                "diversity_lab"]},
                 # chapter 6 compares with chapter 3's layer, attends with chapter 4's
                 # function and sizes its timing with sdpa_backends.timed_lengths; never
                 # solutions/kv.py, its own answers
                 "06_kv": {"solutions": ["_checks", "attention", "heads", "masks", "mha",
                                         "sdpa_backends"]},
                 # chapter 7 builds rotary decoding on chapter 6's layer and cache (kv) and
                 # runs its fast paths with sdpa_backends; never solutions/rotary.py or
                 # positions.py, its own answers
                 "07_positions": {"solutions": ["_checks", "attention", "heads", "masks", "mha",
                                                "kv", "sdpa_backends"]},
                 # the capstone builds on chapters 1-7 (chapter 6's grouped-query layer and
                 # cache, chapter 7's rotary positions, chapter 5's tools) and its lab; never
                 # solutions/capstone.py, its own answers
                 "08_capstone": {"solutions": ["_checks", "attention", "heads", "masks", "mha",
                                               "diversity_lab", "diversity", "rotary", "kv",
                                               "capstone_lab"]}}
# Data files (paths under chapters/) that a chapter's notebook reads: they ship beside it.
EXTRA_FILES = {"02_heads": ["data/heads_parallelism.json"],
               "07_positions": ["data/sdpa_backends_h200.json"],
               "08_capstone": ["data/genesis_kjv.txt", "data/README.md",
                               "data/capstone_ablation.json"]}


def site_url():
    """The published book's address: html.baseurl of _config.yml, the one place it is set."""
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    return config["html"]["baseurl"]


def student_notebook_text(text):
    """A chapter notebook's text with the kit's address filled in (see autograde.kit)."""
    return text.replace(kit.WHEEL_URL_TOKEN, kit.wheel_url(site_url()))


def answers_shipped(assignment):
    """The earlier chapters whose answers chapter `assignment`'s release holds (its lab
    code imports them), e.g. ['01_attention', ..., '04_masks'] for chapter 5."""
    shipped = {m for modules in EXTRA_SHIPPED.get(assignment, {}).values() for m in modules}
    return [a for a in assignments() if a.split("_", 1)[1] in shipped and a < assignment]


def assignments():
    """Names of the chapter assignments, in course order: ['01_attention', ...]."""
    return sorted(p.stem for p in CHAPTERS.glob("[0-9][0-9]_*.ipynb"))


def imported_checks(tree, where):
    """Names of the checks modules that the parsed code `tree` imports, in order of
    appearance: `from checks import X`, `from checks.X import ...`, `import checks.X`, and,
    inside the package itself, `from .X import ...` and `from . import X`.

    `where` names the code in the error raised for a relative import that leaves the
    package (it would not resolve in a release, which holds no parent package).
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted = [alias.name.split(".") for alias in node.names]
            found += [parts[1] for parts in dotted if parts[0] == "checks" and len(parts) > 1]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 1:
                raise ValueError(f"{where} line {node.lineno}: a relative import outside the "
                                 "checks package cannot ship")
            parts = (node.module or "").split(".")
            package = node.level == 1 or parts[0] == "checks"
            inner = parts if node.level else parts[1:]  # the path inside the package
            if package and inner and inner[0]:
                found.append(inner[0])         # from checks.X import ... / from .X import ...
            elif package:
                found += [alias.name for alias in node.names]  # from checks import X
    return list(dict.fromkeys(found))


def notebook_checks(path):
    """Names of the checks modules that the code cells of notebook `path` import: the one
    source of truth for what ships with a chapter. Magics are read as Jupyter reads them."""
    path = Path(path)
    transform = TransformerManager().transform_cell
    found = []
    for number, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            where = f"{path.name} cell {number}"
            try:
                tree = parse(transform(source), where)
            except SyntaxError as error:
                raise ValueError(f"{where} is not Python, so what it imports is unknown: "
                                 f"{error}") from error
            found += imported_checks(tree, where)
    return list(dict.fromkeys(found))


def checks_modules(assignment, kit_form=False):
    """The checks modules that ship with chapter `assignment`, sorted: ALWAYS_CHECKS, those
    its notebook imports and, transitively, the siblings those import. kit_form: the
    student's copy, whose @reference bodies the kit removes (kit.kit_source), so a module
    only they import (formulas, which computes right answers) is the grader's alone. Raises
    ValueError if one of them is not a module of chapters/checks/."""
    with PARSING:  # its parses are not thread-safe (see notebook.parse)
        return _checks_modules(assignment, kit_form)


def _checks_modules(assignment, kit_form):
    notebook = CHAPTERS / f"{assignment}.ipynb"
    todo = [(m, notebook.name) for m in ALWAYS_CHECKS + notebook_checks(notebook)]
    done = set()
    while todo:
        module, importer = todo.pop()
        if module in done:
            continue
        path = CHECKS / f"{module}.py"
        if not path.is_file():
            raise ValueError(f"{importer} imports checks.{module}, but there is no "
                             f"{path.relative_to(REPO)}")
        done.add(module)
        where = str(path.relative_to(REPO))
        text = kit.kit_source(path.read_text(), where) if kit_form else path.read_text()
        todo += [(m, where) for m in imported_checks(parse(text, where), where)]
    return sorted(done)


# An image a chapter's text shows from a file beside it: ![alt](figures/name.svg)
IMAGE = re.compile(r"!\[[^\]]*\]\((figures/[^)\s]+)\)")


def notebook_images(assignment):
    """The image files under chapters/ that the notebook's markdown shows, e.g.
    ['figures/mha_shapes.svg']: they ship with it, or Jupyter shows a broken image."""
    cells = json.loads((CHAPTERS / f"{assignment}.ipynb").read_text())["cells"]
    found = [m for c in cells if c["cell_type"] == "markdown"
             for m in IMAGE.findall("".join(c["source"]))]
    return list(dict.fromkeys(found))


def shipped_files(assignment):
    """(source path, name) of each file shipped beside the notebook: its checks modules as
    'checks/<module>.py', each module of EXTRA_SHIPPED as '<package>/<module>.py', the
    images its text shows, then its EXTRA_FILES. The EXTRA_SHIPPED packages' __init__.py
    files are not among them: prepare_source writes them (package_init)."""
    files = [(CHECKS / f"{m}.py", f"checks/{m}.py") for m in checks_modules(assignment)]
    for package, modules in EXTRA_SHIPPED.get(assignment, {}).items():
        files += [(REPO / package / f"{m}.py", f"{package}/{m}.py") for m in modules]
    files += [(CHAPTERS / name, name) for name in notebook_images(assignment)]
    files += [(CHAPTERS / name, name) for name in EXTRA_FILES.get(assignment, [])]
    return files


def package_init(package, modules):
    """The text of `package`/__init__.py cut down to `modules`: its docstring, its relative
    imports from those modules only (`from .mha import ...`), and __all__ to match.

    Derived from the repository's __init__.py rather than kept by hand, so that a name
    added to the package reaches the release; a name from a module that does not ship
    (e.g. solutions.diversity) cannot.
    """
    tree = parse((REPO / package / "__init__.py").read_text())
    kept = [node for node in tree.body if isinstance(node, ast.ImportFrom)
            and node.level == 1 and node.module in modules]
    doc = (ast.get_docstring(tree) or f"The {package} package.").rstrip()
    note = textwrap.fill("Shipped with this chapter in part: the modules "
                         f"{', '.join(modules)}.", 88)
    lines = [f'"""{doc}\n\n{note}\n"""']
    names = []
    for node in kept:
        imported = [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in node.names]
        names += [a.asname or a.name for a in node.names]
        lines.append(textwrap.fill(", ".join(imported), 92,
                                   initial_indent=f"from .{node.module} import (",
                                   subsequent_indent=" " * (len(node.module) + 15)) + ")")
    lines.append("\n" + textwrap.fill(", ".join(map(repr, names)), 92,
                                      initial_indent="__all__ = [", subsequent_indent=" " * 11)
                 + "]")
    return "\n".join(lines) + "\n"


def prepare_source(course_dir, assignment):
    """Copy chapter `assignment` and its shipped files to <course_dir>/source/<assignment>/
    (nbgrader releases that folder, and autograde copies its files over each submission's)."""
    target = Path(course_dir) / SOURCE / assignment
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / f"{assignment}.ipynb").write_text(
        student_notebook_text((CHAPTERS / f"{assignment}.ipynb").read_text()))
    for path, name in shipped_files(assignment):
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / name)
    for package, modules in EXTRA_SHIPPED.get(assignment, {}).items():
        (target / package / "__init__.py").write_text(package_init(package, modules))
    return target


def stale_files(course_dir, assignment):
    """The files of chapter `assignment`'s source folder (prepare_source) that run in the
    student's process (its checks and solutions modules, as release copied or wrote them)
    and differ from what the repository would ship now: [name], empty when the release is
    up to date. The grader judges with the repository's checks (engine._check_imports),
    the student's process runs the released ones (given(), the in-process forbid): grading
    a release older than the checks would mix two versions."""
    source = Path(course_dir) / SOURCE / assignment
    wanted = {name: path.read_bytes() for path, name in shipped_files(assignment)
              if name.endswith(".py")}
    wanted |= {f"{package}/__init__.py": package_init(package, modules).encode()
               for package, modules in EXTRA_SHIPPED.get(assignment, {}).items()}
    there = {p.relative_to(source).as_posix() for p in source.rglob("*.py")
             if "__pycache__" not in p.parts}
    return sorted(name for name in set(wanted) | there if name not in wanted
                  or not (source / name).is_file() or (source / name).read_bytes() != wanted[name])


def db_settings(db_url):
    """nbgrader's CourseDirectory settings for the gradebook at `db_url` (None: its sqlite
    gradebook.db). nbgrader's default course id, "", has no row in its `course` table: sqlite
    does not enforce that foreign key, PostgreSQL refuses every new assignment, so another
    database gets a course id that nbgrader then creates."""
    if not db_url:
        return {}
    settings = {"db_url": db_url}
    if not db_url.startswith("sqlite"):
        settings["course_id"] = "course"
    return settings


def nbgrader_api(course_dir, db_url=None):
    """nbgrader's Python API on `course_dir` (an in-process equivalent of its CLI)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    # nbgrader runs `alembic` from PATH to create the gradebook: use this environment's.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
    config = Config()
    config.CourseDirectory.root = str(Path(course_dir).resolve())
    for name, value in db_settings(db_url).items():
        setattr(config.CourseDirectory, name, value)
    config.CourseDirectory.ignore = ["__pycache__", "*.pyc", ".ipynb_checkpoints"]
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def release(course_dir=".", only=None, db_url=None):
    """Generate the student version of each chapter into <course_dir>/release/<assignment>/.

    Returns {assignment: release folder}. Raises RuntimeError with nbgrader's log if
    generation fails.
    """
    api = nbgrader_api(course_dir, db_url)
    chosen = list(only or assignments())
    fixtures = kit.record(Path(course_dir).resolve() / "fixtures", chosen)
    done = {}
    for assignment in chosen:
        prepare_source(course_dir, assignment)
        result = api.generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n"
                               f"{result.get('error', '')}\n{result.get('log', '')}")
        released = Path(course_dir).resolve() / RELEASE / assignment
        # The source keeps the grader's checks (nbgrader autograde copies them over each
        # submission); the student's copy gets the kit: no reference code, fixtures instead.
        kit.write_checks(released / "checks", checks_modules(assignment, kit_form=True),
                         [fixtures[assignment]])
        done[assignment] = released
    # The installable kit, served to every student at any time, so it holds no answer: the
    # checks and fixtures of the chapters whose release holds none (chapter 5's checks run
    # a stand-in model built from chapters 1-4; they come with its zip only). Fixtures of
    # chapters released before count too, when only some are released now.
    public = [a for a in assignments() if not answers_shipped(a)]
    recorded = Path(course_dir).resolve() / "fixtures"
    kit.build_wheel(Path(course_dir).resolve() / "kit",
                    sorted(set().union(*(checks_modules(a, kit_form=True) for a in public))),
                    [recorded / f"{a}.npz" for a in public if (recorded / f"{a}.npz").exists()])
    return done


def notebook_json(notebook):
    """A notebook dict as nbgrader's generate_assignment writes it (json, indent 1, keys
    sorted, non-ASCII as is, a final newline), so a copy differs from the English student
    version in what was changed only."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def release_language(course_dir, assignment, language):
    """The student version of chapter `assignment` in `language` (e.g. "zh_CN"), from its
    English release (course.release): release-<language>/<assignment>/, a copy of
    release/<assignment>/ whose notebook's markdown cells are translated through the
    chapter's catalogue (autograde.translate), whose figures are those drawn in the language
    where there are (language_figures), whose metadata["course"]["language"] names the
    language, as does checks/LANGUAGE (the checks' messages in it); its code cells, cell ids and nbgrader metadata (grade ids, points,
    checksums) are the English ones, so one gradebook grades both.

    Returns (folder, [(cell index, message left in English)]): empty once the chapter's
    catalogue is complete. Raises FileNotFoundError if the chapter has no catalogue."""
    from autograde import translate
    english = release_dir(course_dir, None).resolve() / assignment
    target = release_dir(course_dir, language).resolve() / assignment
    catalogue = translate.chapter_catalogue(assignment, language)
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(english, target, ignore=shutil.ignore_patterns("__pycache__"))
    notebook = target / f"{assignment}.ipynb"
    translated, unmatched = translate.translate_notebook(json.loads(notebook.read_text()),
                                                         catalogue, language)
    for name in language_figures(translated, language):
        shutil.copy2(CHAPTERS / name, target / name)
    notebook.write_text(notebook_json(translated), encoding="utf-8")
    # its checks speak the language too, with nothing set by the student (checks/language.py)
    (target / "checks" / "LANGUAGE").write_text(f"{language}\n", encoding="utf-8")
    return target, unmatched


def language_figures(notebook, language):
    """The images of the notebook dict `notebook`'s markdown that exist in `language`
    (figures/<name>.<language>.svg beside figures/<name>.svg, Sphinx's default
    figure_language_filename, which the book in that language shows), shown instead: the
    cells are changed in place. Returns their names, e.g. ['figures/mask_shapes.zh_CN.svg']."""
    found = []

    def localised(match):
        path = Path(match[1])
        name = str(path.with_name(f"{path.stem}.{language}{path.suffix}"))
        if not (CHAPTERS / name).is_file():
            return match[0]
        found.append(name)
        return match[0].replace(f"({match[1]})", f"({name})")

    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = [IMAGE.sub(localised, line) for line in cell["source"]] \
                if isinstance(cell["source"], list) else IMAGE.sub(localised, cell["source"])
    return list(dict.fromkeys(found))


def write_zip(folder, zip_dir):
    """<zip_dir>/<assignment>.zip of the release `folder`, with the kit's wheel (for
    students who install the checks rather than keep them beside the notebook) and the
    student requirements inside."""
    folder = Path(folder)
    wheel = folder.parent.parent / "kit" / kit.WHEEL
    Path(zip_dir).mkdir(parents=True, exist_ok=True)
    archive = Path(zip_dir) / f"{folder.name}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                out.write(path, Path(folder.name) / path.relative_to(folder))
        out.write(wheel, Path(folder.name) / wheel.name)
        out.write(REPO / "requirements-student.txt",
                  Path(folder.name) / "requirements-student.txt")
    return archive


def language_roots():
    """{language: its edition's root folder relative to the English one, "zh_CN"} for every
    language but English (_config.yml's course_language_editions)."""
    config = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    editions = config["sphinx"]["config"].get("course_language_editions", {})
    return {language: root.strip("/") for language, root in editions.items() if root.strip("/")}


def student_branch(course_dir, target):
    """The tree of the repository branch `student` that the launch buttons open (see
    _config.yml): each released chapter's notebook at chapters/<assignment>.ipynb, as in
    the book, with the checks beside it, and the student requirements. A chapter whose
    release holds earlier answers (chapter 5: its lab, and checks that run a model built
    from chapters 1-4) gives its notebook only, which asks for its zip. The editions in
    other languages (_config.yml's course_language_editions) have theirs under their root,
    as on the published site: zh_CN/chapters/<assignment>.ipynb from release-zh_CN/, where
    the Chinese pages' launch buttons open them (their path_to_book). Returns `target`."""
    target = Path(target)
    if target.exists():
        shutil.rmtree(target)
    (target / "chapters").mkdir(parents=True)
    releases = {"": Path(course_dir) / RELEASE}
    for language, root in language_roots().items():
        if release_dir(course_dir, language).is_dir():
            releases[root] = release_dir(course_dir, language)
    for root, release in releases.items():
        chapters = target / root / "chapters"
        for folder in sorted(release.iterdir()):
            for path in sorted(folder.rglob("*")):
                relative = path.relative_to(folder)
                if path.is_file() and "__pycache__" not in relative.parts and \
                        (path.suffix == ".ipynb" or not answers_shipped(folder.name)):
                    (chapters / relative).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, chapters / relative)
    shutil.copy2(REPO / "requirements-student.txt", target / "requirements.txt")
    return target
