"""What ships beside each chapter's notebook: the checks its notebook imports, not all.

The modules are derived from the notebook (autograde.course.checks_modules); these tests
hold the derivation against the grader's own reading of the notebook, against small
made-up packages, and against a real release through nbgrader (about 5 s).
"""
import ast
import json
import re

import pytest

from autograde import course
from autograde.engine import _check_imports


def _notebook(path, *cells):
    """Write a notebook of the given code cells to `path`."""
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "source": c, "metadata": {},
                                           "outputs": [], "execution_count": None}
                                          for c in cells]}))
    return path


@pytest.fixture
def fake_course(tmp_path, monkeypatch):
    """chapters/ with a checks package of its own: a imports b, b imports common; c is
    imported by nobody."""
    checks = tmp_path / "checks"
    checks.mkdir()
    for name, text in {"__init__": '"""checks"""\n', "common": "X = 1\n",
                       "a": "from .b import Y\n", "b": "from . import common\nY = 2\n",
                       "c": "from .common import X\n"}.items():
        (checks / f"{name}.py").write_text(text)
    monkeypatch.setattr(course, "REPO", tmp_path)
    monkeypatch.setattr(course, "CHAPTERS", tmp_path)
    monkeypatch.setattr(course, "CHECKS", checks)
    return tmp_path


@pytest.mark.parametrize("assignment", course.assignments())
def test_the_derived_modules_are_those_the_notebook_imports(assignment):
    """Non-empty, and the same modules that the grader binds to the test cells."""
    modules = course.notebook_checks(course.CHAPTERS / f"{assignment}.ipynb")
    nb = json.loads((course.CHAPTERS / f"{assignment}.ipynb").read_text())
    grader = {m.__name__.removeprefix("chapters.checks.") for m in _check_imports(nb).values()}
    assert modules and sorted(modules) == sorted(grader)
    # common imports nested (the one walker over nested values), operations (the runtime's
    # operations on the student's objects) and diagnose (the shape families that name a
    # wrong output), and every module's messages are read through language (the catalogue
    # of the language spoken), and operations makes the repair family's one-edit variants
    # of the student's code with repair, so every chapter ships them
    core = {"__init__", "common", "diagnose", "language", "nested", "operations", "repair",
            *modules}
    # and the checks modules those import: only an earlier chapter's, whose answers this
    # chapter's release holds anyway (chapter 7's rotary decoding check runs chapter 6's
    # decoding loop, checks/kv.py), never another chapter's
    imported = set(course.checks_modules(assignment, kit_form=True)) - core
    assert imported <= {a.split("_", 1)[1] for a in course.answers_shipped(assignment)}
    shipped = sorted(core | imported)
    assert course.checks_modules(assignment, kit_form=True) == shipped
    # formulas computes the exercises' right answers: only the grader's copy (the course's
    # source/, never a student's) holds it, with the stand-in models of chapters 5 and 7
    # that two of its formulas build (only common.formula_mistakes and common.step_values,
    # behind step_mistakes, import it, in @reference bodies the kit removes)
    formulas = course.CHECKS / "formulas.py"
    needs = course.imported_checks(ast.parse(formulas.read_text()), str(formulas))
    # (and language, the catalogue its step sentences are said from, which every chapter ships)
    assert set(needs) <= {"common", "diagnose", "language", "diversity", "capstone"}, needs
    assert course.checks_modules(assignment) == sorted({*shipped, "formulas", *needs})


def test_every_import_form_is_read(tmp_path):
    path = _notebook(tmp_path / "nb.ipynb",
                     "%matplotlib inline\nfrom checks import attention as check, heads\n",
                     "import checks.mha\n!echo hi\n",
                     "def f():\n    from checks.masks import something\n",
                     "import checksum, torch.checks\nfrom checks_other import x\n")
    assert course.notebook_checks(path) == ["attention", "heads", "mha", "masks"]


def test_sibling_imports_are_followed(fake_course):
    _notebook(fake_course / "01_fake.ipynb", "from checks import a as check\n")
    assert course.checks_modules("01_fake") == ["__init__", "a", "b", "common"]
    assert [name for _, name in course.shipped_files("01_fake")] == [
        "checks/__init__.py", "checks/a.py", "checks/b.py", "checks/common.py"]


@pytest.mark.parametrize("source, importer", [("from checks import nosuch\n", "01_fake.ipynb"),
                                              ("from checks import d\n", "checks/d.py")])
def test_a_missing_module_fails_loudly(fake_course, source, importer):
    (fake_course / "checks" / "d.py").write_text("from .gone import Z\n")
    _notebook(fake_course / "01_fake.ipynb", source)
    with pytest.raises(ValueError, match=f"{importer} imports checks\\."):
        course.checks_modules("01_fake")


def test_an_import_outside_the_package_fails_loudly(fake_course):
    (fake_course / "checks" / "a.py").write_text("from ..solutions import answer\n")
    _notebook(fake_course / "01_fake.ipynb", "from checks import a\n")
    with pytest.raises(ValueError, match="outside the checks package"):
        course.checks_modules("01_fake")


def test_the_release_of_chapter_1_ships_its_checks_only(course_release):
    course_dir = course_release("01_attention")  # (course.release, made once per test run)
    folder = course_dir / "release" / "01_attention"
    shipped = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert {"checks/__init__.py", "checks/attention.py", "checks/common.py"} <= shipped
    assert not shipped & {"checks/mha.py", "checks/diversity.py"}
    assert "figures/attention_shapes.svg" in shipped  # the text's diagram, beside it
    assert {p for p in shipped if p.startswith("checks/")} == {
        "checks/__init__.py", "checks/attention.py", "checks/common.py", "checks/diagnose.py",
        "checks/nested.py", "checks/operations.py", "checks/repair.py",
        "checks/fixtures/01_attention.npz",
        "checks/language.py", "checks/locale/zh_CN/LC_MESSAGES/checks.mo"}
    # the student form: answers replayed from the fixtures, none computed
    kit_line = re.compile(r"^KIT = True", re.M)
    assert kit_line.search((folder / "checks" / "common.py").read_text())
    assert not kit_line.search((course_dir / "source" / "01_attention" / "checks" /
                                "common.py").read_text())  # nbgrader autograde's copy


def test_every_image_a_chapter_shows_ships_with_it():
    """Each ![...](figures/...) of a chapter's text is a file, listed among what ships."""
    for assignment in course.assignments():
        names = [name for _, name in course.shipped_files(assignment)]
        for image in course.notebook_images(assignment):
            assert (course.CHAPTERS / image).is_file(), image
            assert image in names
