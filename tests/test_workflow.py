"""The GitHub Actions workflow that publishes the book (.github/workflows/book.yml): its
shape (Pages, the edition, the schedule), its Makefile targets (documented in the README),
and its shell steps run here: the edition step against `make -n`, the kit check against
the built book, the Chinese class edition put under zh_CN/ of the English one (each page's
language switch then leads to a page of the site), the student-branch step against a bare
repository standing in for GitHub's."""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from autograde import course

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "book.yml"
SITES = {"class": REPO / "_build" / "class" / "_build" / "html",
         "self-study": REPO / "_build" / "html"}
# the edition in Chinese published with each, under zh_CN/ of it
ZH_SITES = {"class": REPO / "_build" / "zh_CN-class" / "_build" / "html",
            "self-study": REPO / "_build" / "zh_CN" / "_build" / "html"}


@pytest.fixture(scope="module")
def workflow():
    return yaml.safe_load(WORKFLOW.read_text())


def steps(workflow, job="build"):
    return {step.get("name", step.get("uses", "")): step for step in workflow["jobs"][job]["steps"]}


def makefile_targets():
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, re.M))


def test_publishes_to_pages_on_push_schedule_and_by_hand(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads `on` as true
    assert triggers["push"]["branches"] == ["main"]
    assert triggers["schedule"][0]["cron"]
    assert triggers["workflow_dispatch"]["inputs"]["edition"]["default"] == "class"
    assert workflow["permissions"] == {"contents": "write", "pages": "write",
                                       "id-token": "write"}
    build = steps(workflow)
    assert build["actions/upload-pages-artifact@v3"]["with"]["path"] == "${{ env.SITE }}"
    assert [s["uses"] for s in workflow["jobs"]["deploy"]["steps"]] == ["actions/deploy-pages@v4"]
    assert workflow["jobs"]["deploy"]["needs"] == "build"


def test_calls_only_documented_makefile_targets(workflow):
    readme = (REPO / "README.md").read_text()
    documented = set(re.findall(r"`make ([a-z-]+)`", readme)) | set(
        re.findall(r"^make ([a-z-]+)", readme, re.M))
    called = set()
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            # every target of each make call (`make book-class book-zh-class`)
            for targets in re.findall(r"\bmake((?: [a-z][a-z-]*)+)", step.get("run", "")):
                called |= set(targets.split())
    assert called == {"book", "book-zh-self-study", "book-class", "book-zh-class", "student-branch"}
    assert called <= makefile_targets() and called <= documented, called - documented


def run_step(script, cwd, env, make_dir=REPO):
    """Run a step's `run` script in bash, its `make` replaced by `make -n` on this
    repository's Makefile (what each target would run, resolved but not run)."""
    shim = cwd / "shim"
    shim.mkdir(exist_ok=True)
    real_make = shutil.which("make")
    (shim / "make").write_text(f'#!/bin/sh\nexec "{real_make}" -n -C "{make_dir}" "$@"\n')
    (shim / "make").chmod(0o755)
    env = dict(os.environ, **env, PATH=f"{shim}:{os.environ['PATH']}")
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("edition", sorted(SITES))
def test_edition_step_builds_the_chosen_edition(workflow, tmp_path, edition):
    script = steps(workflow)["Build the edition"]["run"]
    github_env = tmp_path / "github_env"
    done = run_step(script, tmp_path, {"EDITION": edition, "GITHUB_ENV": str(github_env)})
    assert done.returncode == 0, done.stderr
    target = "book-class" if edition == "class" else "book"
    assert "jupyter-book build" in done.stdout  # make -n printed the target's recipe
    assert ("--path-output _build/class" in done.stdout) == (target == "book-class")
    assert ("--path-output _build/zh_CN-class" in done.stdout) == (target == "book-class")
    written = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    assert REPO / written["SITE"] == SITES[edition]
    assert (REPO / written["ZH_SITE"] if written["ZH_SITE"] else None) == ZH_SITES[edition]
    bad = run_step(script, tmp_path, {"EDITION": "draft", "GITHUB_ENV": str(github_env)})
    assert bad.returncode != 0 and "unknown edition" in bad.stdout


@pytest.mark.parametrize("edition", sorted(SITES))
def test_kit_check_passes_on_the_built_book(workflow, tmp_path, edition):
    site = SITES[edition]
    if not (site / "index.html").is_file():
        pytest.skip(f"{site} is not built (make test builds it)")
    script = steps(workflow)["Check the kit is served at <baseurl>kit/"]["run"]
    done = run_step(script, tmp_path, {"SITE": str(site)})
    assert done.returncode == 0, done.stderr
    assert ".whl" in done.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "index.html").write_text("<html></html>")
    assert run_step(script, tmp_path, {"SITE": str(empty)}).returncode != 0


@pytest.mark.parametrize("edition", sorted(SITES))
def test_the_site_holds_its_chinese_edition(workflow, tmp_path, edition):
    """Each site as the workflow uploads it, from the built editions: the English one with
    the Chinese one of the same edition under zh_CN/, where every page's language switch
    leads to the same page of the other language, both ways (a page of the site, never of
    the other edition). With no Chinese edition given, the step adds nothing."""
    from tests.test_language_switch import SWITCH, pages

    english, chinese = SITES[edition], ZH_SITES[edition]
    if not (english / "index.html").is_file() or not (chinese / "index.html").is_file():
        pytest.skip(f"the {edition} editions are not built (make test builds them)")
    script = steps(workflow)["Put the Chinese edition under zh_CN/"]["run"]
    site = tmp_path / "site"
    shutil.copytree(english, site)
    done = run_step(script, tmp_path, {"SITE": str(site), "ZH_SITE": str(chinese)})
    assert done.returncode == 0, done.stderr
    roots = {"en": site.resolve(), "zh_CN": (site / "zh_CN").resolve()}
    for language, root in roots.items():
        other = roots["zh_CN" if language == "en" else "en"]
        built = {page: text for page, text in pages(root).items()
                 if language != "en" or not page.startswith("zh_CN/")}
        assert "chapters/intro" in built
        for page, text in built.items():
            (href, _), = SWITCH.findall(text)
            target = ((root / page).parent / href).resolve()
            assert target == other / f"{page}.html" and target.is_file(), (language, page, href)
    empty = tmp_path / "no-chinese"
    empty.mkdir()
    assert run_step(script, tmp_path, {"SITE": str(empty), "ZH_SITE": ""}).returncode == 0
    assert list(empty.iterdir()) == []


def test_student_branch_step_pushes_the_student_tree(workflow, tmp_path):
    built = REPO / "_build" / "course" / "release"
    if not built.is_dir():
        pytest.skip("the released course is not built (make test builds it)")
    script = steps(workflow)["Update the branch student"]["run"]
    origin = tmp_path / "origin.git"
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", "--bare", str(origin)], check=True)
    subprocess.run(["git", "clone", "-q", str(origin), str(checkout)], check=True,
                   capture_output=True)
    (checkout / "README.md").write_text("the course\n")
    subprocess.run(["git", "-C", str(checkout), "add", "."], check=True)
    subprocess.run(["git", "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-qm", "main"], check=True)
    # what `make student-branch` writes (its recipe is checked by make -n in run_step)
    course.student_branch(REPO / "_build" / "course", checkout / "_build" / "student-branch")
    env = {"RUNNER_TEMP": str(tmp_path), "GITHUB_SHA": "abc123"}
    done = run_step(script, checkout, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "student_branch" in done.stdout  # the Makefile's recipe, resolved by make -n
    listing = subprocess.run(["git", "-C", str(origin), "ls-tree", "-r", "--name-only",
                              "student"], capture_output=True, text=True, check=True).stdout
    assert "chapters/01_attention.ipynb" in listing.split()
    shown = subprocess.run(["git", "-C", str(origin), "show",
                            "student:chapters/01_attention.ipynb"], capture_output=True,
                           check=True).stdout
    assert shown == (built / "01_attention" / "01_attention.ipynb").read_bytes()
    again = run_step(script, checkout, env)  # nothing changed: no new commit
    assert again.returncode == 0 and "up to date" in again.stdout
    count = subprocess.run(["git", "-C", str(origin), "rev-list", "--count", "student"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert count == "1"
