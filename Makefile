# make book       -> .venv (created if missing) + the executed book in _build/html
#                    (the self-study edition: solutions folded)
# make book-class -> the class edition in _build/class/_build/html (no solution code)
# make test       -> .venv (created if missing), both editions, the whole test suite
# make book-zh    -> the self-study edition in Simplified Chinese in _build/zh_CN/_build/html
#                    (from the catalogues of locales/zh_CN/LC_MESSAGES/), and the class edition
#                    in Chinese (make book-zh-class, _build/zh_CN-class/_build/html;
#                    make book-zh-self-study: the self-study one alone)
# make locales    -> the English messages extracted again (`make gettext`, _build/gettext) and
#                    merged into those catalogues, for translators
# make bench -> the CPU benchmark of solutions.MultiHeadAttention against nn.MultiheadAttention
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# nbgrader runs `alembic` from PATH: keep the environment's bin/ first.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYTHONPATH := $(CURDIR)

.PHONY: venv book book-class book-zh book-zh-self-study book-zh-class gettext locales student-branch test bench clean

venv: $(STAMP)

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==24.3.1
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $@

CHAPTER_FILES := $(wildcard chapters/*.ipynb chapters/checks/*.py chapters/figures/*.svg solutions/*.py)
DOWNLOADS := _build/downloads/.stamp
BOOK_SOURCES := _config.yml _toc.yml $(wildcard chapters/*.md _ext/*.py _ext/static/*) $(CHAPTER_FILES)
BOOK := _build/html/.stamp
CLASS_BOOK := _build/class/_build/html/.stamp
# MathJax is served from the book itself, not a CDN, so pages render offline: the npm
# registry's tarball, pinned by version and checksum, unpacked into _build/vendor/mathjax/
# (named in _config.yml's html_static_path), keeping its CommonHTML output only.
MATHJAX_VERSION := 3.2.2
MATHJAX_SHA256  := 1b9c0a1c44df864e915690558e72adb9cc5203360daefd385084ced3b6c64c09
MATHJAX := _build/vendor/.mathjax-$(MATHJAX_VERSION)

# --all: every page rewritten (executed outputs still come from the cache, ~10 s here),
# or pages that did not change keep a stale sidebar and stale next/previous links.
# _ext/execute_chapters.py first executes the notebooks the cache lacks, two at a time (the
# build would run them one after the other).
book: $(STAMP) $(DOWNLOADS) $(MATHJAX)
	$(BIN)/python _ext/execute_chapters.py
	$(BIN)/jupyter-book build . --warningiserror --keep-going --all
	touch $(BOOK)

# `make test` builds the book first when it is missing or older than its sources.
$(BOOK): $(STAMP) $(BOOK_SOURCES)
	$(MAKE) book

$(MATHJAX):
	rm -rf _build/vendor _build/npm && mkdir -p _build/vendor/mathjax _build/npm
	cd _build/npm && npm pack --silent mathjax@$(MATHJAX_VERSION)
	echo "$(MATHJAX_SHA256)  _build/npm/mathjax-$(MATHJAX_VERSION).tgz" | sha256sum --check --quiet
	tar -xzf _build/npm/mathjax-$(MATHJAX_VERSION).tgz -C _build/vendor/mathjax \
	  --strip-components=2 --exclude='*svg*' --exclude='*/es5/tex-chtml*' \
	  --exclude='*/es5/mml-chtml.js' --exclude='*/es5/node-main.js' \
	  --exclude='*/es5/latest.js' package/es5
	tar -xzf _build/npm/mathjax-$(MATHJAX_VERSION).tgz -C _build/vendor/mathjax \
	  --strip-components=1 package/LICENSE
	touch $@

# The class edition: the same pages with the solution code removed (outputs stay), for a
# course whose assignments are open. Executed outputs come from the same cache, under keys
# of their own (the cells' tags differ): `make book` and `make test` store them for both
# editions (_ext/execute_chapters.py); a `make book-class` alone executes what is missing.
# Only the chapters that _config.yml's class_calendar has opened, with the kit of those
# chapters (autograde/class_calendar.py writes the table of contents and the kit).
# CLASS_OUT: where it goes (tests/test_class_calendar.py builds other settings elsewhere);
# CLASS_CONFIG: another language's configuration (`make book-zh-class`), else _config.yml.
# The site is written afresh (Sphinx leaves what it no longer writes): a page or zip of a
# chapter that an earlier build published, with another calendar, must not stay in it.
CLASS_OUT ?= _build/class
book-class: $(STAMP) $(DOWNLOADS) $(MATHJAX)
	rm -rf $(CLASS_OUT)/_build/html
	$(BIN)/python -m autograde.class_calendar --toc $(CLASS_OUT)/toc.yml --kit $(CLASS_OUT)/site-extra
	COURSE_EDITION=class COURSE_SITE_EXTRA=$(CLASS_OUT)/site-extra $(BIN)/jupyter-book build . \
	  $(CLASS_CONFIG:%=--config %) \
	  --warningiserror --keep-going --all --path-output $(CLASS_OUT) --toc $(CLASS_OUT)/toc.yml
	touch $(CLASS_OUT)/_build/html/.stamp

$(CLASS_BOOK): $(STAMP) $(BOOK_SOURCES) $(DOWNLOADS) $(MATHJAX)
	$(MAKE) book-class

# The Chinese edition (issue 24), from the same sources through Sphinx's gettext workflow:
# `make gettext` extracts every page's English messages into _build/gettext (one .pot per
# document, the notebooks not executed: ~4 s); `make locales` merges them into the
# catalogues locales/zh_CN/LC_MESSAGES/<document>.po with sphinx-intl (new messages empty,
# changed ones fuzzy, removed ones dropped), which translators then fill in.
# _ext/course_language.py writes each build's configuration from _config.yml.
GETTEXT := _build/gettext
LANGUAGES := zh_CN
gettext: $(STAMP)
	$(BIN)/python _ext/course_language.py config --gettext _build/gettext-config/_config.yml
	rm -rf $(GETTEXT) && $(BIN)/jupyter-book build . --config _build/gettext-config/_config.yml \
	  --path-output _build/gettext-config --builder custom --custom-builder gettext --warningiserror --all -q
	mv _build/gettext-config/_build/gettext $(GETTEXT)
	$(BIN)/pybabel extract -k _ --no-default-keywords --no-location -o $(GETTEXT)/figures.pot \
	  chapters/figures/make_diagrams.py
	$(BIN)/python _ext/plot_labels.py extract $(GETTEXT)/plots.pot
	$(BIN)/python _ext/print_messages.py extract $(GETTEXT)/prints.pot
	$(BIN)/pybabel extract -F locales/checks-babel.cfg -k pgettext:1c,2 --no-default-keywords \
	  --no-location -o $(GETTEXT)/checks.pot chapters/checks
	$(BIN)/pybabel extract -k _ -k _p:1c,2 --no-default-keywords --no-location -o $(GETTEXT)/grader.pot \
	  autograde/messages.py

# The pages' catalogues, the figures' (figures.po: the diagrams' labels, which Babel's
# Python extractor takes from make_diagrams.py's _("...") calls above), the plots' (plots.po:
# the labels of the notebooks' matplotlib plots, which _ext/plot_labels.py finds in their
# code), the printed output's (prints.po: what the notebooks' code prints, each print call's
# template and the strings that fill its fields, which _ext/print_messages.py finds), the checks' (checks.po: every checks module's MESSAGES, which
# autograde/checks_catalogue.py extracts for pybabel, each message's context
# "<module>.<key>") and the grader's (grader.po: feedback's, report's and the grader's
# verdicts' sentences, the _("...") templates of autograde/messages.py) merged with the
# English of now; then the diagrams drawn again in each language from their catalogue. The
# checks read checks.po (the grader, compiled in memory) or the checks.mo the release writes
# into each kit (autograde/kit.py); the grader reads grader.po, compiled in memory.
locales: gettext
	$(BIN)/sphinx-intl update --pot-dir $(GETTEXT) --locale-dir locales $(LANGUAGES:%=-l %) \
	  --no-obsolete --line-width 0
	$(BIN)/python chapters/figures/make_diagrams.py

# The book in Chinese: its configuration is _config.yml's with `language: zh_CN` and the
# catalogues of locales/ (Sphinx compiles each .po into the .mo it reads, next to it). The
# code cells are the English ones; their outputs come from the edition's own jupyter-cache
# (_build/.jupyter_cache-zh_CN), which `execute_chapters.py --language zh_CN` fills with
# kernels that draw each plot's labels from plots.po in a CJK font and print what the code
# prints from prints.po (_ext/plot_language.py, _ext/print_language.py:
# about 2 min 15 s of CPU for the eight chapters, two at a time, when the code, plots.po or
# that module changed); the build runs with the same kernels. Search segments Chinese words
# with jieba (requirements.txt); the plots' Chinese needs Debian's fonts-noto-cjk, which
# .ci/run installs at a pinned version.
# Published, the Chinese root lies under zh_CN/ of the English one (_config.yml's
# course_language_editions, which the header's language switch follows). Then the checks of
# the Chinese pages that `make test` cannot run without them: each page's language switch,
# both ways (tests/test_language_switch.py), every translation on its page, and the
# catalogues' own tests (tests/test_translations.py).
ZH_OUT := _build/zh_CN
ZH_BOOK := $(ZH_OUT)/_build/html/.stamp
ZH_CLASS_OUT ?= _build/zh_CN-class
ZH_CLASS_BOOK := $(ZH_CLASS_OUT)/_build/html/.stamp
ZH_CATALOGUES := $(wildcard locales/zh_CN/*.yml locales/zh_CN/LC_MESSAGES/*.po locales/zh_CN/LC_MESSAGES/*/*.po chapters/figures/*.zh_CN.svg)
# Each catalogue compiled into the .mo that Sphinx reads before an edition's build, with
# Sphinx's own function: Sphinx compiles the outdated ones at the start of each build, and the
# two Chinese editions built side by side (`make test`) would both write the same .mo, one
# reading it half written.
ZH_MO := $(patsubst %.po,%.mo,$(filter %.po,$(ZH_CATALOGUES)))
locales/zh_CN/LC_MESSAGES/%.mo: locales/zh_CN/LC_MESSAGES/%.po
	$(BIN)/python -c "import sys; from pathlib import Path; from sphinx.util.i18n import CatalogInfo; \
	  po = Path(sys.argv[1]); CatalogInfo(str(po.parent), po.stem, 'utf-8').write_mo('zh_CN')" $<
book-zh: $(ZH_BOOK) $(ZH_CLASS_BOOK)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_language_switch.py tests/test_translations.py

# the self-study edition in Chinese alone (what the workflow publishes beside `make book`)
book-zh-self-study: $(ZH_BOOK)

$(ZH_BOOK): $(BOOK) $(DOWNLOADS) $(MATHJAX) $(ZH_CATALOGUES) $(ZH_MO)
	$(BIN)/python _ext/course_language.py config --language zh_CN $(ZH_OUT)/_config.yml
	$(BIN)/python _ext/execute_chapters.py --language zh_CN
	rm -rf $(ZH_OUT)/_build/html  # Sphinx leaves what it no longer writes (an old zip)
	COURSE_LANGUAGE=zh_CN IPYTHONDIR=_build/ipython/zh_CN $(BIN)/jupyter-book build . \
	  --config $(ZH_OUT)/_config.yml --warningiserror --keep-going --all --path-output $(ZH_OUT)
	touch $@

# The class edition in Chinese: `make book-class` with the Chinese edition's configuration,
# the same calendar (the same chapters open, the same kit), the chapters' Chinese zips
# (_build/downloads/zh_CN/, those of the open chapters only: a page copies the zip it links)
# and Chinese student notebooks as the pages' ".ipynb" downloads; the executed outputs come
# from the Chinese cache's class-edition entries (`execute_chapters.py --language zh_CN`
# stores each chapter under both editions' keys: it runs first, a no-op when the cache is full). Published, it lies under zh_CN/ of the English class edition, and each
# page's language switch leads to the same page of the other language's class edition.
book-zh-class: $(STAMP) $(DOWNLOADS) $(MATHJAX)
	$(BIN)/python _ext/course_language.py config --language zh_CN $(ZH_CLASS_OUT)/_config.yml
	$(BIN)/python _ext/execute_chapters.py --language zh_CN
	COURSE_LANGUAGE=zh_CN IPYTHONDIR=_build/ipython/zh_CN \
	  $(MAKE) book-class CLASS_OUT=$(ZH_CLASS_OUT) CLASS_CONFIG=$(ZH_CLASS_OUT)/_config.yml

$(ZH_CLASS_BOOK): $(CLASS_BOOK) $(DOWNLOADS) $(MATHJAX) $(ZH_CATALOGUES) $(ZH_MO)
	$(MAKE) book-zh-class

# Student versions, generated by nbgrader, zipped for the download link on each chapter
# page; the checks package (no answers) served by the book at <baseurl>kit/. The same in
# each other language (their markdown translated through the book's catalogues, the code
# and nbgrader's ids the same): _build/course/release-zh_CN/, zipped into
# _build/downloads/zh_CN/ for the Chinese edition's pages.
$(DOWNLOADS): $(STAMP) $(CHAPTER_FILES) autograde/kit.py autograde/course.py autograde/translate.py \
	  $(ZH_CATALOGUES)
	$(BIN)/python -m autograde release --course-dir _build/course --zip _build/downloads \
	  $(LANGUAGES:%=--lang %)
	rm -rf _build/site-extra && mkdir -p _build/site-extra
	cp -r _build/course/kit _build/site-extra/kit
	cp requirements-student.txt _build/site-extra/
	touch $@

# What the launch buttons open: the student notebooks at the chapters' paths, with their
# checks and the student requirements, for the branch `student` named in _config.yml; the
# Chinese ones under zh_CN/chapters/, which the Chinese pages' buttons open.
student-branch: $(DOWNLOADS)
	$(BIN)/python -c "from autograde import course; \
	  print(course.student_branch('_build/course', '_build/student-branch'))"
	@echo "commit that tree as the branch 'student' of the repository in _config.yml"

# The editions, once the notebooks they show are executed (two at a time, in English, then in
# Chinese into the Chinese cache), are built side by side (each a one-core Sphinx build
# reading its language's cache; each Chinese one after its English one), so that the tests
# of every edition run. Then
# pytest-xdist workers, three on the two cores: with two, a core idled whenever its worker waited on a
# subprocess (nbgrader's kernels, pip, Chromium, a sandbox), about a quarter of the run
# (bench/CI_TIMES.md); --dist loadgroup keeps the tests that share a costly module fixture
# on one worker (tests/conftest.py: work_unit, ONE_WORKER); the log ends with the slowest
# twenty tests (issue 19: each made cheaper or its cost explained), and every test's time
# (setup, call and teardown together) is kept in _build/test-times.xml (JUnit XML: where the
# next run's minutes went, without running the suite again).
TEST_WORKERS ?= 3
test: $(STAMP) $(DOWNLOADS) $(MATHJAX)
	$(BIN)/python _ext/execute_chapters.py
	$(BIN)/python _ext/execute_chapters.py --language zh_CN
	$(MAKE) -j2 $(BOOK) $(CLASS_BOOK) $(ZH_BOOK) $(ZH_CLASS_BOOK)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20 \
	  --junit-xml=_build/test-times.xml

bench: $(STAMP)
	$(BIN)/python bench/bench_mha.py --output bench/README.md

clean:
	rm -rf _build .pytest_cache .hypothesis
