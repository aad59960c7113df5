"""Execute the book's chapter notebooks into its jupyter-cache, two at a time, once for both
editions, before `jupyter-book build` reads them (`make book`, `make test`).

The build executes each notebook its cache lacks, one after the other, on one core
(myst-nb's cache mode: myst_nb/core/execute/cache.py), and the cache's key hashes the cell
metadata too: the class edition's tags (course_solutions.EDITIONS) made `make book-class`
execute every chapter a second time (chapter 8 alone trains for about 45 s). Here each
notebook is prepared as course_solutions prepares it for each edition; the ones the cache
lacks are executed once (in their own folder, with _config.yml's timeout, errors not
allowed, as the build does), and the outputs are stored under every edition's key. A
notebook that fails here is left out of the cache: the build executes it again and reports
the error as it always has.

    PYTHONPATH=. python _ext/execute_chapters.py [--jobs N]    (from the repository root)

With --language (`make book-zh`: zh_CN), the same into that edition's own cache
(course_language.language_cache), each kernel started with COURSE_LANGUAGE set and an
IPython directory whose startup file draws the plots in that language
(_ext/plot_language.py) and prints what the code prints in that language
(_ext/print_language.py); the cache is emptied first when the plots' catalogue, the printed
output's, those modules or the checks' catalogue changed since it was filled (the cache's
keys hash the code only).
"""
import argparse
import hashlib
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat
import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution

import plot_language
import print_language
from autograde import kit
from course_language import language_cache
from course_solutions import EDITIONS, prepared  # (this folder, _ext/, is sys.path[0])

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK_VERSION = 4  # as myst-nb reads a notebook (myst_nb/core/read.py)


def book_notebooks():
    """The .ipynb files _toc.yml names, in its order."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text())
    files = [entry["file"] for part in toc.get("parts", [])
             for entry in part.get("chapters", [])]
    return [REPO / f"{name}.ipynb" for name in files if (REPO / f"{name}.ipynb").is_file()]


def editions_of(path, baseurl):
    """{edition: the notebook as the build reads it in that edition} (nbformat nodes)."""
    text = path.read_text(encoding="utf-8")
    return {name: nbformat.reads(json.dumps(prepared(json.loads(text), path.stem, name, baseurl,
                                                     kit)), as_version=NOTEBOOK_VERSION)
            for name in EDITIONS}


def execute(notebook, folder, timeout):
    """(`notebook` executed in `folder`, seconds, None), or (None, None, the error's text)."""
    result = single_nb_execution(notebook, cwd=str(folder), timeout=timeout,
                                 allow_errors=False, meta_override=True)
    if result.err is not None:
        return None, None, f"{type(result.err).__name__}: {result.exc_string or result.err}"
    return notebook, result.time, None


def with_outputs(notebook, executed):
    """`notebook` given the outputs and execution counts of `executed`, the same notebook
    but for cell metadata (another edition's tags)."""
    for cell, done in zip(notebook.cells, executed.cells):
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = done.outputs, done.execution_count
    notebook.metadata = executed.metadata
    return notebook


def language_kernels(config, language):
    """`language`'s jupyter-cache, emptied when what translates its outputs changed (the
    plots' catalogue and the module that draws them, the checks' catalogue that their
    printed messages come from, the catalogue of what the notebooks' code prints and the
    module that prints it: _ext/print_language.py), with every kernel started from now on drawing and
    printing in that language (the pool's processes and their kernels inherit this
    environment)."""
    cache = get_cache(str(REPO / language_cache(config, language)))
    catalogues = REPO / "locales" / language / "LC_MESSAGES"
    drawn_by = [catalogues / f"{plot_language.CATALOGUE}.po", catalogues / "checks.po",
                Path(plot_language.__file__), catalogues / f"{print_language.CATALOGUE}.po",
                Path(print_language.__file__)]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in drawn_by)).hexdigest()
    stamp = Path(cache.path) / "plot-labels.sha256"
    if not stamp.exists() or stamp.read_text() != digest:
        if Path(cache.path).exists():
            cache.clear_cache()
        cache = get_cache(str(REPO / language_cache(config, language)))
        Path(cache.path).mkdir(parents=True, exist_ok=True)
        stamp.write_text(digest)
    os.environ["COURSE_LANGUAGE"] = language
    os.environ["IPYTHONDIR"] = str(plot_language.ipython_dir(
        language, REPO / "_build" / "ipython" / language))
    return cache


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--language", help="an edition's language (zh_CN): its own cache")
    args = parser.parse_args(argv)
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    if args.language:
        cache = language_kernels(config, args.language)
    else:
        cache = get_cache(str(REPO / config["execute"]["cache"]))
    missing = {}  # {path: {edition: notebook the cache lacks}}
    for path in book_notebooks():
        for name, notebook in editions_of(path, config["html"]["baseurl"]).items():
            try:
                cache.match_cache_notebook(notebook)
            except KeyError:
                missing.setdefault(path, {})[name] = notebook
    if not missing:
        print(f"execute_chapters: every notebook is in the cache{' of ' + args.language if args.language else ''}, "
              "for both editions")
        return 0
    print(f"execute_chapters: {len(missing)} notebooks, {args.jobs} at a time", flush=True)
    # the longest first, so that the short ones fill the other core meanwhile: the later
    # chapters train (5, 8) and time (6, 7), chapter 8 alone about 40 s of a minute's work
    longest_first = sorted(missing, key=lambda path: path.stem, reverse=True)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = {path: pool.submit(execute, next(iter(missing[path].values())), path.parent,
                                     config["execute"]["timeout"])
                   for path in longest_first}
        for path, future in futures.items():
            executed, seconds, error = future.result()
            name = path.relative_to(REPO)
            if error is not None:  # the build executes it again and shows the error
                print(f"execute_chapters: {name} failed, left to the build: "
                      f"{error.strip().splitlines()[-1] if error.strip() else error}", flush=True)
                continue
            record = cache.add_nb_to_project(str(path))
            for notebook in missing[path].values():
                cache.cache_notebook_bundle(
                    CacheBundleIn(with_outputs(notebook, executed), record.uri,
                                  data={"execution_seconds": seconds}),
                    check_validity=False, overwrite=True)
            print(f"execute_chapters: {name} executed in {seconds:.1f} s "
                  f"({', '.join(missing[path])})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
