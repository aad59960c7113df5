"""The online book as a reader sees it: every page of each edition in a real browser, the
English self-study book (_build/html, `make book`) and the Chinese one
(_build/zh_CN/_build/html, `make book-zh`; issue 24), and the class edition of each
(_build/class/_build/html, `make book-class`; _build/zh_CN-class/_build/html, `make
book-zh-class`: the pages the class calendar opened, no solution code). Every test that looks
at the book runs on the four (ids [en-...], [zh_CN-...], [en-class-...], [zh_CN-class-...]);
where a test looks for words (the predict-then-run questions, the search), it takes the
edition's words from its language's own catalogue (locales/<language>/LC_MESSAGES/), never
from a copy kept here.

Debian's Chromium (/usr/bin/chromium, or $CHROMIUM; `.ci/run` installs it where it is
missing), driven by Playwright for Python, never a browser that Playwright downloads.
The book is served on loopback and every request that leaves the machine is refused and
reported, so these tests prove that the book works offline: MathJax, fonts and scripts
all come from its own files.

Each page of the table of contents is loaded once at desktop width (full-page screenshot
in _build/screenshots/<page>.png, for review; the other editions' in
_build/screenshots/<edition>/), once at each tablet width (<page>-tablet.png,
<page>-tablet-sidebar.png: the English self-study edition only) and once at phone width
(<page>-phone.png); the checks then look at what was recorded. `make test` builds the
editions first when they are missing or older than their sources; run `make book`, `make
book-class` and `make book-zh` (both Chinese editions) before calling pytest on this file
directly.
"""
import contextlib
import functools
import http.server
import json
import os
import re
import threading
import unicodedata
import zipfile
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
import yaml

from tests.translations import LOCALES, catalogue_path, read_catalogue

REPO = Path(__file__).resolve().parent.parent
ENGLISH = "en"
SCREENSHOTS = REPO / "_build" / "screenshots"
# Each edition: its language, its built root, the make target that builds it, where its
# screenshots go, its table of contents (a class edition's: the chapters the class calendar
# opened, which `make book-class` writes beside its build), and whether it is a class edition
# (solution cells removed, not folded).
EDITIONS = {
    ENGLISH: dict(language=ENGLISH, html=REPO / "_build" / "html", make="make book",
                  shots=SCREENSHOTS, toc=REPO / "_toc.yml", solutions="folded"),
    "zh_CN": dict(language="zh_CN", html=REPO / "_build" / "zh_CN" / "_build" / "html",
                  make="make book-zh", shots=SCREENSHOTS / "zh_CN", toc=REPO / "_toc.yml",
                  solutions="folded"),
    "en-class": dict(language=ENGLISH, html=REPO / "_build" / "class" / "_build" / "html",
                     make="make book-class", shots=SCREENSHOTS / "class",
                     toc=REPO / "_build" / "class" / "toc.yml", solutions="removed"),
    "zh_CN-class": dict(language="zh_CN",
                        html=REPO / "_build" / "zh_CN-class" / "_build" / "html",
                        make="make book-zh-class", shots=SCREENSHOTS / "zh_CN-class",
                        toc=REPO / "_build" / "zh_CN-class" / "toc.yml", solutions="removed"),
}


def _language(edition):
    """The language of `edition` ("en", "zh_CN"): the words its pages show."""
    return EDITIONS[edition]["language"]


CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# Without the background-networking flags Chromium keeps calling Google's hosts, which a
# closed network refuses. Playwright's launch() always starts from a new, empty profile
# (a fresh temporary --user-data-dir), and passes --headless itself.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
DESKTOP = dict(viewport={"width": 1280, "height": 900})
PHONE = dict(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
             device_scale_factor=2)
# Tablets, at the two widths where the theme's layout changes in a tablet's range (measured in
# the built book): at 768 px and below the article loses its side padding and the header
# shrinks (sphinx-book-theme's max-width 768px), with the sidebar a drawer: 768 is an iPad's
# portrait width. At 960 px the primary sidebar joins the page (pydata-sphinx-theme's lg
# breakpoint), 25% wide until sphinx-book-theme makes it 20% at 992: 960 is where the article
# column is narrowest of all widths from 600 up (720 px, against 752 at 1280).
TABLET = dict(viewport={"width": 768, "height": 1024}, is_mobile=True, has_touch=True,
              device_scale_factor=2)
TABLET_SIDEBAR = dict(viewport={"width": 960, "height": 1280}, has_touch=True)
VIEWPORTS = {"desktop": DESKTOP, "tablet": TABLET, "tablet-sidebar": TABLET_SIDEBAR,
             "phone": PHONE}
NARROW = ("tablet", "tablet-sidebar", "phone")  # below the desktop: the page must fit as it is
TIMEOUT_MS = 20_000

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"no Chromium at {CHROMIUM}: install Debian's chromium (apt-get install -y "
           "chromium; .ci/run does it before `make test`) or set CHROMIUM to a Chromium binary")


def _toc_pages(path=REPO / "_toc.yml"):
    toc = yaml.safe_load(Path(path).read_text())
    return [toc["root"]] + [c["file"] for part in toc["parts"] for c in part["chapters"]]


PAGES = _toc_pages()
CHAPTERS = [p for p in PAGES if re.fullmatch(r"chapters/\d\d_\w+", p)]
CONFIG = yaml.safe_load((REPO / "_config.yml").read_text())


def _name(page):
    return page.rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- the edition's words
@functools.cache
def _translations(language, document):
    """{English message: what `document`'s page in `language` shows instead}, from the
    language's catalogue; a fuzzy translation is left out, as Sphinx leaves it out of the .mo
    it builds (gettext_allow_fuzzy_translations is off). {} for English."""
    if language == ENGLISH:
        return {}
    path = catalogue_path(document, LOCALES / language / "LC_MESSAGES")
    return {m.id: m.string for m in read_catalogue(path) if m.id and m.string and not m.fuzzy}


def _in_language(language, document, english):
    """The words `document`'s page in `language` shows for the English message `english`: its
    translation, or the English itself where the catalogue has none (a page not yet
    translated shows its English)."""
    return _translations(language, document).get(english, english)


PREDICT = "**Predict, then run.**"


@functools.cache
def _predict_questions(language, page_name):
    """Each "Predict, then run" question of the page's notebook, in order, in `language`'s
    words: [{cell: its markdown cell's index, lead: the bold words that open it
    ("Predict, then run."; "先预测，再运行。"), summary: its folded answer's <summary>}].
    In the notebook a question is a paragraph that opens with PREDICT, followed by the raw
    HTML block "<details>\n<summary>...</summary>"; each is one message of the page's
    catalogue (a paragraph's message has its line breaks as spaces, as Sphinx extracts it;
    a raw block's keeps them and its final one). [] for a page that is no notebook."""
    notebook = REPO / (page_name + ".ipynb")
    if not notebook.exists():
        return []
    questions = []
    for n, cell in enumerate(json.loads(notebook.read_text())["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or PREDICT not in source:
            continue
        blocks = source.split("\n\n")
        at = next(i for i, block in enumerate(blocks) if block.startswith(PREDICT))
        question = _in_language(language, page_name, " ".join(blocks[at].split("\n")))
        answer = next((b for b in blocks[at + 1:] if b.startswith("<details>")), "")
        summary = re.search(r"<summary>(.*?)</summary>",
                            _in_language(language, page_name, answer + "\n"), re.S)
        questions.append({"cell": n, "lead": re.match(r"\*\*(.+?)\*\*", question).group(1),
                          "summary": summary.group(1).strip() if summary else None})
    return questions


# --------------------------------------------------------------------------- fixtures
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module", params=list(EDITIONS))
def edition(request):
    """The edition under test (a key of EDITIONS): every test that takes it (or `site`, or
    `visit`) runs once per edition, the English self-study one first."""
    return request.param


@pytest.fixture(scope="module")
def pages(edition):
    """The pages `edition` publishes, in the order of its table of contents (every page of
    _toc.yml; a class edition's, those of the chapters the class calendar opened)."""
    toc = EDITIONS[edition]["toc"]
    if not toc.is_file():
        pytest.fail(f"{toc} is missing: run `{EDITIONS[edition]['make']}` (`make test` does it)")
    return _toc_pages(toc)


def _built(edition):
    """The root of `edition`'s built book; the test fails where it is not built."""
    html = EDITIONS[edition]["html"]
    if not (html / "index.html").exists():
        pytest.fail(f"{html} has no built book: run `{EDITIONS[edition]['make']}` "
                    "(`make test` does it)")
    return html


@contextlib.contextmanager
def _served(folder):
    """The base URL of `folder` served by a loopback HTTP server in a thread."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site(edition):
    """Base URL of the edition's built book, served on loopback."""
    with _served(_built(edition)) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


class Recorder:
    """A browser context whose requests outside loopback are refused and recorded,
    with the console errors, page errors and failed requests of its pages."""

    def __init__(self, browser, **options):
        self.context = browser.new_context(**options)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.outside, self.errors = [], []
        self.context.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if urlsplit(url).hostname in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def new_page(self):
        page = self.context.new_page()
        page.on("console", lambda m: m.type == "error" and self.errors.append(
            f"console: {m.text} ({m.location.get('url', '')})"))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(
            f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and self.errors.append(
            f"HTTP {r.status}: {r.url}"))
        return page

    def close(self):
        self.context.close()


# Waits until MathJax has typeset the page (where the page has maths) and every image
# has loaded or failed; returns what MathJax did.
SETTLE_JS = """async () => {
  const sleep = ms => new Promise(r => setTimeout(r, ms));
  let mathjax = 'no maths';
  if (document.querySelector('.math')) {
    if (!document.querySelector('script[src*="mathjax"]')) mathjax = 'no MathJax script on the page';
    else {
      for (let i = 0; i < 200 && !(window.MathJax && MathJax.startup && MathJax.startup.promise); i++)
        await sleep(50);
      if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
        await MathJax.startup.promise;
        mathjax = 'typeset';
      } else mathjax = 'MathJax never started';
    }
  }
  await Promise.all([...document.images].map(img => img.complete ? null :
    new Promise(r => { img.addEventListener('load', r); img.addEventListener('error', r); })));
  return mathjax;
}"""

# What a reader sees of the page: text outside code and rendered maths, the maths,
# the images, the outputs of executed cells.
INSPECT_JS = """() => {
  // the text outside code, with each rendered formula replaced by MATH
  const outsideMaths = [];
  const skip = ['pre', 'code', 'script', 'style', 'noscript', 'textarea'];
  const walk = node => {
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) outsideMaths.push(child.textContent);
      else if (child.nodeType !== Node.ELEMENT_NODE) continue;
      else if (child.tagName.toLowerCase() === 'mjx-container') outsideMaths.push('MATH');
      else if (!skip.includes(child.tagName.toLowerCase())) walk(child);
    }
  };
  walk(document.body);
  const text = e => e.textContent.trim().replace(/\\s+/g, ' ').slice(0, 160);
  return {
    text: outsideMaths.join(''),
    maths: document.querySelectorAll('.math').length,
    unrendered: [...document.querySelectorAll('.math')]
      .filter(e => !e.querySelector('mjx-container')).map(text),
    containers: document.querySelectorAll('mjx-container').length,
    mathErrors: [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
      .map(e => e.getAttribute('data-mjx-error') || text(e)),
    images: [...document.images].map(img => ({
      src: img.getAttribute('src'), alt: img.getAttribute('alt'),
      loaded: img.complete && img.naturalWidth > 0,
      cell: ((img.closest('.cell') || {querySelector: () => null}).querySelector('.cell_input pre')
             || {textContent: ''}).textContent.trim().split('\\n')[0].slice(0, 80)})),
    errorOutputs: [...document.querySelectorAll('.output.error, .output.traceback')].map(text),
    stderr: [...document.querySelectorAll('.output.stderr')].map(text)
      .filter(t => /Error|Warning|Traceback/.test(t)),
    tracebacks: [...document.querySelectorAll('.cell_output')]
      .filter(e => /Traceback \\(most recent call last\\)/.test(e.textContent)).map(text),
    scripts: [...document.scripts].map(s => s.src).filter(Boolean),
    mathjaxVersion: window.MathJax && MathJax.version || null,
    next: [...document.querySelectorAll('.prev-next-area a.right-next')].map(a => a.href),
    previous: [...document.querySelectorAll('.prev-next-area a.left-prev')].map(a => a.href),
    launch: [...document.querySelectorAll('.dropdown-launch-buttons a')].map(a => a.href),
    downloads: [...document.querySelectorAll('a.reference.download')]
      .map(a => ({text: a.textContent.trim(), href: a.href})),
  };
}"""

WIDTH_JS = """() => {
  const width = document.documentElement.clientWidth;
  window.scrollTo(10000, window.scrollY);
  const scrolled = window.scrollX;
  window.scrollTo(0, window.scrollY);
  const sticking = [];
  const wide = scrolled > 0 || document.documentElement.scrollWidth > width;
  for (const e of wide ? document.body.querySelectorAll('*') : []) {
    const r = e.getBoundingClientRect();
    if (r.width && r.right > width + 1 && getComputedStyle(e).position !== 'fixed') {
      let clipped = false;
      for (let a = e.parentElement; a && a !== document.body; a = a.parentElement)
        if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(a).overflowX)) {
          clipped = true; break;
        }
      if (!clipped) sticking.push(`${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`
                                  + ` right=${Math.round(r.right)}`);
    }
  }
  return {width, documentWidth: document.documentElement.scrollWidth,
          bodyWidth: document.body.scrollWidth, scrolled, sticking: sticking.slice(0, 10)};
}"""


# Every figure of the page: its rendered width and, for an SVG, the size at which its
# smallest text is drawn. The SVG is fetched and placed, hidden, in the page so that the
# browser computes its text's font sizes (attributes, style, inheritance); a size in the
# SVG's own units times (rendered width / viewBox width) is the size on screen.
FIGURES_JS = """async () => {
  const body = parseFloat(getComputedStyle(document.querySelector('.bd-article p')
                                           || document.body).fontSize);
  const figures = [];
  const images = [...document.querySelectorAll('.bd-article img')]
    .filter(img => img.closest('.cell_output, figure, .figure, p'));  // p: a Markdown image
  for (const img of images) {
    const src = img.getAttribute('src');
    const width = img.getBoundingClientRect().width;
    const figure = {src, width: Math.round(width), svg: /\\.svg(\\?|#|$)/i.test(src),
                    smallest: null, text: null};
    if (figure.svg) {
      const parsed = new DOMParser().parseFromString(await (await fetch(img.src)).text(),
                                                     'image/svg+xml');
      const holder = document.createElement('div');
      holder.style.cssText = 'position:absolute; left:-100000px; top:0; visibility:hidden';
      const svg = document.importNode(parsed.documentElement, true);
      holder.appendChild(svg);
      document.body.appendChild(holder);
      const box = svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width
        ? svg.viewBox.baseVal.width : svg.width.baseVal.value;
      for (const t of svg.querySelectorAll('text')) {
        if (!t.textContent.trim()) continue;
        // a text's size is that of its largest glyphs: a formula's subscripts and
        // superscripts are smaller, as they are in the body text's own maths
        const spans = [...t.querySelectorAll('tspan')].filter(s => s.textContent.trim());
        const size = spans.length ? Math.max(...spans.map(s => parseFloat(getComputedStyle(s).fontSize)))
                                  : parseFloat(getComputedStyle(t).fontSize);
        const shown = size * width / box;
        if (figure.smallest === null || shown < figure.smallest) {
          figure.smallest = Math.round(shown * 10) / 10;
          figure.text = t.textContent.trim().slice(0, 40);
        }
      }
      holder.remove();
    }
    figures.push(figure);
  }
  return {body, figures};
}"""

# course.js sets each figure's least width from its smallest text (data-course-floor="done"
# once it has); the measurements wait for that.
FIGURES_SIZED_JS = """() => [...document.querySelectorAll('.bd-article .cell_output img')]
  .every(img => img.dataset.courseFloor === 'done')"""

# Printed outputs at desktop and tablet widths, each measured as printed (no wrapping): the widest
# line against the column. A check's verdict (a line that starts with ✔) is a sentence,
# which may wrap.
OUTPUTS_JS = """() => {
  const wide = [];
  for (const pre of document.querySelectorAll('.bd-article .cell_output pre')) {
    if (pre.textContent.trim().startsWith('\u2714')) continue;
    const before = pre.style.whiteSpace;
    pre.style.whiteSpace = 'pre';
    if (pre.scrollWidth > pre.clientWidth + 1)
      wide.push(`${pre.scrollWidth} px > ${pre.clientWidth} px: `
                + pre.textContent.split('\\n').reduce((a, l) => l.length > a.length ? l : a, '').slice(0, 90));
    pre.style.whiteSpace = before;
  }
  return wide;
}"""

# At phone and tablet widths: every display formula, table and figure that is wider than its box must
# scroll inside it and say so (course.js: class course-scrolls and a visible hint), and no
# formula may be cut by an ancestor that hides what overflows.
SCROLL_JS = """() => {
  const problems = [];
  const label = e => (e.textContent.trim() || (e.querySelector('img') || {}).alt || '')
    .replace(/\\s+/g, ' ').slice(0, 60);
  const boxes = document.querySelectorAll(
    ".bd-article div.math mjx-container[display='true'], .bd-article .pst-scrollable-table-container, "
    + ".bd-article .course-figure-scroll");
  for (const box of boxes) {
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    const anchor = box.matches('mjx-container') ? box.closest('div.math') : box;
    const hint = anchor.nextElementSibling;
    const overflow = getComputedStyle(box).overflowX;
    if (!['auto', 'scroll'].includes(overflow))
      problems.push(`${label(anchor)}: wider than its box and overflow-x is ${overflow}`);
    else if (!box.classList.contains('course-scrolls') || !hint
             || !hint.classList.contains('course-scroll-hint') || !hint.offsetHeight)
      problems.push(`${label(anchor)}: scrolls with no visible sign of it`);
    const outer = anchor.getBoundingClientRect(), inner = box.getBoundingClientRect();
    if (inner.right > outer.right + 1)
      problems.push(`${label(anchor)}: cut at the right edge (${Math.round(inner.right)} > ${Math.round(outer.right)})`);
  }
  return problems;
}"""


# Each "Predict, then run" question (a paragraph that starts with one of `leads`, the
# edition's words for "Predict, then run."): the summary of its folded answer, the results
# the answer quotes (its code literals) and the output of the first code cell after it, as
# the page shows them.
PREDICT_JS = """leads => {
  const cells = [...document.querySelectorAll('.bd-article div.cell')];
  return [...document.querySelectorAll('.bd-article details')]
    .filter(d => leads.some(lead => ((d.previousElementSibling || {}).textContent || '')
                                      .trim().startsWith(lead)))
    .map(d => {
      const cell = cells.find(c => d.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING);
      const output = cell && cell.querySelector('.cell_output');
      return {question: d.previousElementSibling.textContent.trim().replace(/\\s+/g, ' ').slice(0, 90),
              summary: (d.querySelector('summary') || {textContent: ''}).textContent.trim(),
              quoted: [...d.querySelectorAll('code')].map(c => c.textContent.trim().replace(/\\s+/g, ' ')),
              printed: output ? output.textContent.replace(/\\s+/g, ' ') : ''};
    });
}"""

# At desktop width every display formula fits the column (a long one is set on two lines).
WIDE_MATHS_JS = """() => [...document.querySelectorAll(".bd-article div.math mjx-container[display='true']")]
  .filter(box => box.scrollWidth > box.clientWidth + 1)
  .map(box => `${box.scrollWidth} px > ${box.clientWidth} px: `
              + box.textContent.trim().replace(/\\s+/g, ' ').slice(0, 60))"""


# Every character of the page that no installed font draws, which the reader would see as a
# box ("tofu", the font's .notdef glyph). Each distinct character outside ASCII of the
# page's text (with every <details> open: the answers and solutions a reader unfolds) and
# of its SVG figures' text (fetched and placed, hidden, in the page, as FIGURES_JS does) is
# drawn on a canvas in the font its element computes (family, style, weight: the browser
# falls back along the family list and then through the system's fonts, as it does on the
# page), and so is U+10FFFF, a noncharacter that no font has: a character that draws those
# same pixels is drawn as .notdef. Skipped: what draws nothing by design (spaces, controls,
# format characters, combining marks) and MathJax's hidden copy of each formula for screen
# readers (mjx-assistive-mml; MathJax draws the visible formula from its own fonts).
# Returns {checked: the distinct characters drawn, missing: [{char, font, where}]}.
GLYPHS_JS = """async () => {
  for (const details of document.querySelectorAll('details')) details.open = true;
  const hidden = document.createElement('div');
  hidden.style.cssText = 'position:absolute; left:-100000px; top:0; visibility:hidden';
  document.body.appendChild(hidden);
  const figures = new Map();
  for (const img of [...document.images].filter(i => /\\.svg(\\?|#|$)/i.test(i.getAttribute('src')))) {
    const svg = new DOMParser().parseFromString(await (await fetch(img.src)).text(), 'image/svg+xml');
    figures.set(hidden.appendChild(document.importNode(svg.documentElement, true)),
                img.getAttribute('src'));
  }
  await document.fonts.ready;
  const canvas = document.createElement('canvas');
  canvas.width = 120; canvas.height = 80;
  const context = canvas.getContext('2d', {willReadFrequently: true});
  const draw = (font, text) => {
    context.clearRect(0, 0, canvas.width, canvas.height);
    context.font = font;
    context.textBaseline = 'middle';
    context.fillText(text, 20, 40);
    return {width: context.measureText(text).width,
            pixels: context.getImageData(0, 0, canvas.width, canvas.height).data};
  };
  const same = (a, b) => a.width === b.width && a.pixels.every((v, i) => v === b.pixels[i]);
  const notdef = new Map(), drawn = new Map(), missing = [], checked = new Set();
  const where = (node, holder, char) => {
    const figure = [...figures].find(([svg]) => svg.contains(holder));
    const text = node.textContent.replace(/\\s+/g, ' ').trim();
    const at = Math.max(text.indexOf(char) - 20, 0);
    const section = holder.closest('section[id]');
    return (figure ? `figure ${figure[1]}` : `<${holder.tagName.toLowerCase()}>`
            + (section ? ` in section #${section.id}` : ''))
           + `: "${text.slice(at, at + 40)}"`;
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const holder = node.parentElement;
    if (!holder || holder.closest('script, style, noscript, template, mjx-assistive-mml')) continue;
    const style = getComputedStyle(holder);
    const font = `${style.fontStyle} ${style.fontWeight} 40px ${style.fontFamily}`;
    for (const char of new Set(node.textContent)) {
      if (char.codePointAt(0) < 0x80 || /[\\p{White_Space}\\p{Cc}\\p{Cf}\\p{M}]/u.test(char)) continue;
      checked.add(char);
      const key = `${font}|${char}`;
      if (drawn.has(key)) continue;
      if (!notdef.has(font)) notdef.set(font, draw(font, '\\u{10FFFF}'));
      drawn.set(key, !same(draw(font, char), notdef.get(font)));
      if (!drawn.get(key)) missing.push({char, font: style.fontFamily, where: where(node, holder, char)});
    }
  }
  hidden.remove();
  return {checked: checked.size, missing};
}"""


def _glyphs_missing(found):
    """GLYPHS_JS's `missing` as lines: character, code point, Unicode name, font, where."""
    return [f"{m['char']!r} U+{ord(m['char']):04X} {unicodedata.name(m['char'], '(unassigned)')}"
            f" in font {m['font']}, {m['where']}" for m in found]


# The class editions' solution cells: _ext/course_solutions.py tags them remove-input, so
# their code is not on the page at all (their outputs stay); for each, whether it has none.
REMOVED_SOLUTIONS_JS = """() => [...document.querySelectorAll('.cell.tag_remove-input')]
    .map(cell => cell.querySelector('.cell_input') === null)"""


def _unfold_solutions(page):
    """Each code cell holding a solution: folded (closed <details>, code hidden) as the page
    loads, and showing its code once its summary is clicked."""
    found = []
    # _ext/course_solutions.py tags each solution cell hide-input (and drops nbgrader's
    # markers from the page), so the page's solution cells are the cells with that tag.
    cells = page.locator(".cell.tag_hide-input")
    for i in range(cells.count()):
        cell = cells.nth(i)
        details = cell.locator("details.hide.above-input")
        code = cell.locator(".cell_input")
        state = {"folded": details.count() == 1 and details.get_attribute("open") is None,
                 "hidden": not code.is_visible()}
        if details.count() == 1:
            details.locator("summary").click()
        state["shown"] = code.is_visible() and bool(code.inner_text().strip())
        found.append(state)
    return found


@pytest.fixture(scope="module")
def visit(site, browser, edition, pages):
    """visit(page, viewport="desktop") -> what loading the edition's page recorded (loaded
    once per viewport, cached).

    At desktop width: a full-page screenshot <shots>/<page>.png as the reader first sees the
    page (<shots>: _build/screenshots/, or _build/screenshots/<edition>/ for the others),
    then every solution cell is unfolded, then every character of the page is
    looked up in the fonts (GLYPHS_JS, with every <details> open). At the NARROW widths: a
    screenshot of the top of the page, <page>-<viewport>.png."""
    shots = EDITIONS[edition]["shots"]
    shots.mkdir(parents=True, exist_ok=True)
    cache = {}

    def load(page_name, viewport="desktop"):
        if page_name not in pages:
            pytest.skip(f"{page_name} is not published in the {edition} edition (the class "
                        "calendar has not opened it)")
        key = (page_name, viewport)
        if key not in cache:
            desktop = viewport == "desktop"
            recorder = Recorder(browser, **VIEWPORTS[viewport])
            page = recorder.new_page()
            try:
                response = page.goto(site + page_name + ".html", wait_until="load")
                result = {"status": response.status, "mathjax": page.evaluate(SETTLE_JS)}
                result.update(page.evaluate(INSPECT_JS if desktop else WIDTH_JS))
                page.wait_for_timeout(300)  # course.js marks the boxes once MathJax is done
                page.wait_for_function(FIGURES_SIZED_JS)
                result.update(page.evaluate(FIGURES_JS))
                if not desktop:
                    result["scrolling"] = page.evaluate(SCROLL_JS)
                if viewport != "phone":  # a phone wraps printed lines (course.css)
                    result["wideOutputs"] = page.evaluate(OUTPUTS_JS)
                if desktop:
                    result["wideMaths"] = page.evaluate(WIDE_MATHS_JS)
                    result["predictions"] = page.evaluate(
                        PREDICT_JS, [q["lead"] for q in _predict_questions(_language(edition),
                                                                           page_name)])
                shot = shots / (_name(page_name) + ("" if desktop else f"-{viewport}") + ".png")
                page.screenshot(path=str(shot), full_page=desktop)
                result["screenshot"] = str(shot.relative_to(REPO))
                if desktop:
                    result["solutions"] = _unfold_solutions(page)
                    result["removedSolutions"] = page.evaluate(REMOVED_SOLUTIONS_JS)
                    result["missingGlyphs"] = page.evaluate(GLYPHS_JS)
                result.update(outside=recorder.outside, errors=recorder.errors)
            finally:
                recorder.close()
            cache[key] = result
        return cache[key]

    return load


def _by_page(pages=PAGES):
    return pytest.mark.parametrize("page_name", pages, ids=_name)


# --------------------------------------------------------------------------- every page
def test_built_html_references_nothing_outside(edition):
    """No script, stylesheet, font or icon of any built page is fetched from elsewhere."""
    html = _built(edition)
    tag = re.compile(r"<(?:script|link|img|iframe|source)\b[^>]*>", re.I)
    ref = re.compile(r"""\b(?:src|href)\s*=\s*["']?((?:https?:)?//[^"'\s>]+)""", re.I)
    found = []
    for path in sorted(html.rglob("*.html")):
        for element in tag.findall(path.read_text(errors="replace")):
            if element.lower().startswith("<link") and not re.search(
                    r"""rel=["']?(stylesheet|preload|icon|shortcut icon|modulepreload)""",
                    element, re.I):
                continue
            found += [f"{path.relative_to(html)}: {url}" for url in ref.findall(element)]
    assert not found, "pages load resources from outside the book:\n" + "\n".join(found)


@_by_page()
def test_page_loads_only_from_the_book(visit, page_name):
    result = visit(page_name)
    assert result["status"] == 200, f"{page_name}.html: HTTP {result['status']}"
    assert not result["outside"], \
        f"{page_name} requests outside the book (refused here):\n" + "\n".join(result["outside"])


@_by_page()
def test_no_javascript_errors(visit, page_name):
    errors = visit(page_name)["errors"]
    assert not errors, f"{page_name}:\n" + "\n".join(errors)


# TeX that MathJax did not typeset: $$, \( \[, \command, x_{...}, $...$, and a $ left beside
# a typeset formula (MyST took `$$` inside a paragraph for `$` + inline maths + `$`).
RAW_TEX = re.compile(r"\$\$|\\[()\[\]]|\\[A-Za-z]{2,}|[_^]\{|\$[^\s$][^$\n]{0,80}\$"
                     r"|\$\s*MATH|MATH\s*\$")


@_by_page()
def test_maths_rendered_by_mathjax(visit, page_name):
    result = visit(page_name)
    if result["maths"]:
        assert result["mathjax"] == "typeset", f"{page_name}: {result['mathjax']}"
        assert result["containers"] >= result["maths"]
    assert not result["unrendered"], f"{page_name}: maths left as TeX: {result['unrendered']}"
    assert not result["mathErrors"], f"{page_name}: MathJax errors: {result['mathErrors']}"
    raw = [" ".join(result["text"][max(m.start() - 40, 0):m.end() + 40].split())
           for m in RAW_TEX.finditer(result["text"])]
    assert not raw, f"{page_name}: raw TeX in the text a reader sees:\n" + "\n".join(raw)


@_by_page()
def test_images_load_and_have_alt_text(visit, page_name):
    images = visit(page_name)["images"]
    broken = [i["src"] for i in images if not i["loaded"]]
    assert not broken, f"{page_name}: images that did not load: {broken}"
    # docutils falls back to the file name as alt: that says nothing to a screen reader.
    # A figure of a notebook gets real alt text from its cell's metadata:
    #   "metadata": {"mystnb": {"image": {"alt": "Heat map of ..."}}}
    missing = [f"{i['src']} (drawn by the cell that starts: {i['cell']!r})" for i in images
               if not (i["alt"] or "").strip()
               or re.search(r"\.(png|jpe?g|svg|gif|webp)$", i["alt"].strip(), re.I)]
    assert not missing, (
        f"{page_name}: images without alt text (add "
        '"mystnb": {"image": {"alt": "..."}} to the metadata of the cell that draws them):\n'
        + "\n".join(missing))


@_by_page()
def test_every_character_has_a_glyph(visit, page_name):
    """No character of the page, folded answers and figure labels included, is drawn as an
    empty box: every one is in an installed font (the Chinese edition's in the CJK font that
    .ci/run installs, Debian's fonts-noto-cjk)."""
    result = visit(page_name)["missingGlyphs"]
    assert not result["missing"], (
        f"{page_name}: characters that no installed font draws (a box on the page), of the "
        f"{result['checked']} distinct characters outside ASCII:\n"
        + "\n".join(_glyphs_missing(result["missing"])))


def test_missing_glyphs_are_found(browser, tmp_path):
    """GLYPHS_JS on a page made here: the characters that no font can have (code points that
    Unicode leaves unassigned), in the text, in a folded answer and in an SVG figure's label,
    are reported, with their font and place; the Chinese, accented and typographic
    characters beside them are not."""
    unassigned = {"text": "\u0378", "folded": "\u05eb", "figure": "\u0530"}
    assert all(unicodedata.category(c) == "Cn" for c in unassigned.values())
    (tmp_path / "figure.svg").write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 200 40" width="200" height="40">'
        f'<text x="5" y="25" style="font-family: \'DejaVu Sans\', sans-serif">注意力 × '
        f'{unassigned["figure"]}</text></svg>', encoding="utf-8")
    (tmp_path / "index.html").write_text(
        '<!DOCTYPE html><html lang="zh-CN"><head><meta charset="utf-8"></head><body>'
        f'<section id="made"><p>多头注意力 café — × ≈ {unassigned["text"]}</p>'
        f'<details><summary>答案</summary><p>折叠的 {unassigned["folded"]}</p></details>'
        '<img src="figure.svg" alt="a figure"></section></body></html>', encoding="utf-8")
    with _served(tmp_path) as url:
        page = browser.new_page()
        try:
            page.goto(url + "index.html")
            result = page.evaluate(GLYPHS_JS)
        finally:
            page.close()
    assert sorted(m["char"] for m in result["missing"]) == sorted(unassigned.values()), (
        _glyphs_missing(result["missing"]))
    assert result["checked"] == len(set("多头注意力é—×≈折叠的答案") | set(unassigned.values()))
    where = {m["char"]: m["where"] for m in result["missing"]}
    assert where[unassigned["text"]].startswith("<p> in section #made")
    assert where[unassigned["folded"]].startswith("<p> in section #made: \"折叠的")
    assert where[unassigned["figure"]].startswith("figure figure.svg")
    lines = _glyphs_missing(result["missing"])
    assert any("U+0378 (unassigned) in font" in line for line in lines), lines


@_by_page()
def test_no_cell_shows_an_error(visit, page_name):
    result = visit(page_name)
    assert not result["errorOutputs"], f"{page_name}: error outputs: {result['errorOutputs']}"
    assert not result["tracebacks"], f"{page_name}: tracebacks: {result['tracebacks']}"
    assert not result["stderr"], f"{page_name}: errors or warnings on stderr: {result['stderr']}"


def _by_page_and_viewport(viewports=NARROW):
    return pytest.mark.parametrize(
        "page_name, viewport", [(p, v) for v in viewports for p in PAGES],
        ids=[f"{_name(p)}-{v}" for v in viewports for p in PAGES])


def _tablets_in_english_only(edition, viewport):
    """The Chinese edition and the class editions are loaded at 1280 and 390 px (the widths
    issue 24 names), not at the tablets' widths: the same layout and the same CSS as the
    English self-study pages, which are loaded there, at two more page loads per page on
    CI's budget."""
    if edition != ENGLISH and viewport.startswith("tablet"):
        pytest.skip(f"the {edition} edition is checked at 1280 and 390 px")


def _px(viewport):
    return f"{VIEWPORTS[viewport]['viewport']['width']} px"


@_by_page_and_viewport()
def test_fits_the_width(visit, edition, page_name, viewport):
    """On a phone and on a tablet the page never scrolls sideways as a whole."""
    _tablets_in_english_only(edition, viewport)
    result = visit(page_name, viewport)
    assert not result["outside"] and not result["errors"], result["outside"] + result["errors"]
    assert result["scrolled"] == 0 and result["documentWidth"] <= result["width"], (
        f"{page_name} scrolls sideways at {_px(viewport)}: document {result['documentWidth']} "
        f"px wide; sticking out: {result['sticking']}")


@_by_page()
def test_figure_text_is_readable_at_desktop_width(visit, page_name):
    """At 1280 px no figure draws text smaller than 70% of the body text: each figure is
    an SVG (its text measurable, sharp at any zoom), sized for the column."""
    result = visit(page_name)
    floor = 0.7 * result["body"]
    raster = [f["src"] for f in result["figures"] if not f["svg"]]
    assert not raster, (
        f"{page_name}: figures that are not SVG, whose text size cannot be checked (draw "
        f"them as SVG: the notebook's figure-style cell sets InlineBackend.figure_formats):\n"
        + "\n".join(raster))
    small = [f"{f['src']}: {f['text']!r} drawn at {f['smallest']} px (figure {f['width']} px wide)"
             for f in result["figures"] if f["smallest"] is not None and f["smallest"] < floor]
    assert not small, (
        f"{page_name}: figure text under 70% of the body text ({result['body']:g} px, so "
        f"{floor:.1f} px) at 1280 px; make the figure narrower or its text larger:\n"
        + "\n".join(small))


@_by_page_and_viewport()
def test_figure_text_is_readable_at_every_width(visit, edition, page_name, viewport):
    """On a phone and a tablet no figure draws text smaller than 70% of the body text either.
    The diagrams (drawn 380 units wide, text of 13 units and more) keep 76% in a phone's
    column; the figures of executed cells, drawn for the desktop column, would shrink their
    text to 39-57% at 390 px and to 62% at 601 px (measured). So course.js lets each shrink
    with the column only as far as its smallest text stays at 70%, and narrower than that
    keeps it at that size in a box that scrolls sideways with a visible hint
    (test_wide_boxes_scroll_visibly). The same floor as on a desktop: a phone is held closer,
    but its reader cannot lean in any further to read a smaller label."""
    _tablets_in_english_only(edition, viewport)
    result = visit(page_name, viewport)
    floor = 0.7 * result["body"]
    small = [f"{f['src']}: {f['text']!r} drawn at {f['smallest']} px (figure {f['width']} px wide)"
             for f in result["figures"] if f["smallest"] is not None and f["smallest"] < floor]
    assert not small, (
        f"{page_name}: figure text under 70% of the body text ({result['body']:g} px, so "
        f"{floor:.1f} px) at {_px(viewport)}; draw it narrower, or let it keep its size and "
        "scroll (course.css, course.js):\n" + "\n".join(small))


# A result quoted in a predict question's answer: numbers (with , . % e+-), shapes and lists
# of them, booleans, nan, inf and torch.Size([...]). Code and names (`view`, `(B, L, d_model)`,
# `12 of 12`) are not printed results and are not looked for.
RESULT = re.compile(r"(?:torch\.Size\()?[-+\[(]*(?:[\d.,%e+\-\s\[\]()]*\d[\d.,%e+\-\s\[\]()]*"
                    r"|nan|-?inf|True|False)[\])]*\)?")
# Issue 11: at least three predict-then-run questions on every chapter page (CHAPTERS,
# read from the table of contents; test_every_chapter_is_in_the_toc keeps a new chapter's
# notebook from staying out of it, and so out of this count).
PREDICTIONS_AT_LEAST = 3


def test_results_pattern():
    """What counts as a quoted result, and what is code."""
    for result in ("0.84", "4,198,400", "(2, 3, 3, 5)", "[1, 3, 0, 4]", "29%", "0.0e+00",
                   "-inf", "nan", "True", "torch.Size([4, 2, 4, 6])", "-998244352.0", "6.0e-07"):
        assert RESULT.fullmatch(result), result
    for code in ("view", "(B, L, d_model)", "exp(1000)", "x.view(2, 5, 3, 10 // 3)",
                 "head_dim = 8", "nn.Dropout(p=0.25)", "10 // 3", "12 of 12"):
        assert not RESULT.fullmatch(code), code


@_by_page(CHAPTERS)
def test_predict_answers_are_what_the_next_cell_prints(visit, edition, page_name):
    """Each "Predict, then run" question sits right before the code cell that answers it
    (in the notebook), its answer is folded under the edition's summary ("Answer (open it
    after running the next cell)", or the catalogue's translation of it), and every result
    the answer quotes in backticks is in that cell's output on the page."""
    cells = json.loads((REPO / (page_name + ".ipynb")).read_text())["cells"]
    asked = _predict_questions(_language(edition), page_name)
    for n in (q["cell"] for q in asked):
        assert n + 1 < len(cells) and cells[n + 1]["cell_type"] == "code", (
            f"{page_name}: a predict question not right before the code that answers it: "
            + "".join(cells[n]["source"])[:90])
    found = visit(page_name)["predictions"]
    assert len(asked) >= PREDICTIONS_AT_LEAST, (
        f"{page_name}: {len(asked)} predict questions, {PREDICTIONS_AT_LEAST} wanted")
    assert len(found) == len(asked), (
        f"{page_name}: {len(asked)} predict questions in the notebook, {len(found)} on the page "
        "with a folded answer (<details> right after a paragraph that opens with "
        f"{sorted({q['lead'] for q in asked})})")
    for question, shown in zip(found, asked):
        assert question["summary"] == shown["summary"], (
            f"{page_name}: the answer to {question['question']!r} is folded under "
            f"{question['summary']!r}, not the edition's {shown['summary']!r}")
        quoted = [q for q in question["quoted"] if RESULT.fullmatch(q)]
        assert quoted, (f"{page_name}: the answer to {question['question']!r} quotes no printed "
                        "result in backticks: nothing ties it to what the cell prints")
        missing = [q for q in quoted if q not in question["printed"]]
        assert not missing, (
            f"{page_name}: the answer to {question['question']!r} quotes {missing}, which the "
            f"next cell does not print; it prints:\n{question['printed'][:1500]}")


@_by_page_and_viewport(("desktop", "tablet", "tablet-sidebar"))
def test_printed_outputs_fit_the_column(visit, edition, page_name, viewport):
    """A printed table fits the column on a desktop and a tablet (a phone wraps it)."""
    _tablets_in_english_only(edition, viewport)
    wide = visit(page_name, viewport)["wideOutputs"]
    assert not wide, (f"{page_name}: printed outputs wider than the column at {_px(viewport)} "
                      "(print narrower tables):\n" + "\n".join(wide))


@_by_page()
def test_display_maths_fit_the_column_at_desktop_width(visit, page_name):
    wide = visit(page_name)["wideMaths"]
    assert not wide, (f"{page_name}: display maths wider than the column at 1280 px (break "
                      "it over lines with aligned or gathered):\n" + "\n".join(wide))


@_by_page_and_viewport()
def test_wide_boxes_scroll_visibly(visit, edition, page_name, viewport):
    """Display maths, tables and figures wider than the column scroll and say so."""
    _tablets_in_english_only(edition, viewport)
    problems = visit(page_name, viewport)["scrolling"]
    assert not problems, f"{page_name} at {_px(viewport)}:\n" + "\n".join(problems)


# --------------------------------------------------------------------------- chapter pages
def test_every_chapter_is_in_the_toc():
    """A numbered chapter notebook that the table of contents leaves out is neither built
    nor checked here; every page the guards look at is a chapter file."""
    files = sorted(f"chapters/{p.stem}" for p in (REPO / "chapters").glob("[0-9][0-9]_*.ipynb"))
    assert files and files == sorted(CHAPTERS), (
        f"chapter notebooks {files}, chapters in _toc.yml {sorted(CHAPTERS)}")


def _solution_cells(page_name):
    cells = json.loads((REPO / (page_name + ".ipynb")).read_text())["cells"]
    return [c for c in cells if c["cell_type"] == "code"
            and c.get("metadata", {}).get("nbgrader", {}).get("solution")]


@_by_page(CHAPTERS)
def test_solutions_folded_until_asked(visit, edition, page_name):
    """The self-study editions fold each solution cell's code until the reader opens it; the
    class editions show none of it (its outputs stay): not even folded."""
    solutions = visit(page_name)["solutions"]
    expected = len(_solution_cells(page_name))
    if EDITIONS[edition]["solutions"] == "removed":
        removed = visit(page_name)["removedSolutions"]
        assert solutions == [], f"{page_name}: solution code folded in the {edition} edition"
        assert expected and len(removed) == expected, \
            f"{page_name}: {len(removed)} solution cells removed, {expected} in the notebook"
        assert all(removed), f"{page_name}: a removed solution cell still shows its code"
        return
    assert expected and len(solutions) == expected, \
        f"{page_name}: {len(solutions)} solution cells on the page, {expected} in the notebook"
    for n, state in enumerate(solutions, 1):
        assert state["folded"] and state["hidden"], f"{page_name}: solution {n} is not folded"
        assert state["shown"], f"{page_name}: solution {n} shows no code when unfolded"
    assert not visit(page_name)["errors"], visit(page_name)["errors"]


@_by_page(CHAPTERS)
def test_student_download(visit, browser, page_name, tmp_path):
    chapter = _name(page_name)
    links = [d["href"] for d in visit(page_name)["downloads"] if d["text"] == f"{chapter}.zip"]
    assert len(links) == 1, f"{page_name}: no download link for {chapter}.zip"
    context = browser.new_context()
    try:
        response = context.request.get(links[0])
        assert response.status == 200, f"{links[0]}: HTTP {response.status}"
        path = tmp_path / f"{chapter}.zip"
        path.write_bytes(response.body())
    finally:
        context.close()
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        notebook = [n for n in names if n.endswith(f"{chapter}.ipynb")]
        assert notebook, f"{chapter}.zip holds no {chapter}.ipynb: {names}"
        assert any("checks/" in n for n in names), f"{chapter}.zip has no checks/: {names}"
        source = archive.read(notebook[0]).decode()
    json.loads(source)
    assert "BEGIN SOLUTION" not in source and "BEGIN HIDDEN TESTS" not in source


@_by_page(CHAPTERS)
def test_launch_buttons(visit, edition, page_name):
    """Binder, Colab and JupyterHub open the chapter's notebook from the repository: the
    Chinese pages the Chinese one, under the edition's root (zh_CN/chapters/...)."""
    org_repo = urlsplit(CONFIG["repository"]["url"]).path.strip("/")
    launch = CONFIG["launch_buttons"]
    hrefs = visit(page_name)["launch"]
    root = CONFIG["sphinx"]["config"]["course_language_editions"].get(_language(edition), "")
    notebook = f"{root}{page_name}.ipynb"
    want = {
        "Binder": f"{launch['binderhub_url'].rstrip('/')}/v2/gh/{org_repo}/",
        "Colab": f"{launch['colab_url'].rstrip('/')}/github/{org_repo}/blob/",
        "JupyterHub": f"{launch['jupyterhub_url'].rstrip('/')}/hub/",
    }
    for service, prefix in want.items():
        assert any(h.startswith(prefix) and re.search(rf"[=/]{re.escape(notebook)}\b", h)
                   for h in hrefs), \
            f"{page_name}: no {service} launch link to {notebook}: {hrefs}"


# --------------------------------------------------------------------------- the whole book
def test_mathjax_is_the_books_own(visit, site, pages):
    maths_pages = [p for p in pages if visit(p)["maths"]]
    assert maths_pages, "no page has maths: is dollarmath on?"
    for page_name in maths_pages:
        result = visit(page_name)
        mathjax = [s for s in result["scripts"] if "mathjax" in s.lower()]
        assert len(mathjax) == 1 and mathjax[0].startswith(site), (page_name, mathjax)
        assert result["mathjaxVersion"] == "3.2.2", (page_name, result["mathjaxVersion"])
    for page_name in pages:  # a root _static/ would add each of its .js to every page
        assert len(visit(page_name)["scripts"]) < 40, (page_name, visit(page_name)["scripts"])


# What the search test looks for: the course's subject, in the edition's words (the
# glossary's term for it in the Chinese edition, 多头注意力).
SEARCHED = "multi-head attention"


def _term(language, english):
    """The term of `language` for the English term `english`: the glossary's (locales/
    <language>/GLOSSARY.md), or the English itself in English."""
    if language == ENGLISH:
        return english
    from tests.test_glossary import glossary  # the glossary of zh_CN, the one other edition
    (term,) = [chinese for term, chinese, _ in glossary() if term == english]
    return term


def test_search_finds_multi_head_attention(site, browser, edition):
    """Searching the course's subject finds the chapters. In Chinese the reader types the term
    with no spaces between its words, which the index holds as the words jieba cut it into
    (多头, 注意力): the search splits the query the same way (_ext/course_language.py)."""
    recorder = Recorder(browser, **DESKTOP)
    try:
        page = recorder.new_page()
        page.goto(site + "search.html?q=" + quote(_term(_language(edition), SEARCHED)))
        # searchtools.js writes the summary ("Search finished, found ...", or that nothing
        # matched) once every result is listed, in any language
        page.wait_for_function("() => (document.querySelector('#search-results p.search-summary')"
                               " || {}).textContent")
        results = page.eval_on_selector_all("#search-results ul.search li a",
                                            "as => as.map(a => a.getAttribute('href'))")
        assert any(re.search(r"chapters/\d\d_\w+\.html", r) for r in results), results
        assert not recorder.outside and not recorder.errors, recorder.outside + recorder.errors
    finally:
        recorder.close()


def test_next_and_previous_links_follow_the_table_of_contents(visit, site, pages):
    urls = [site + p + ".html" for p in pages]
    for i, page_name in enumerate(pages):
        result = visit(page_name)
        assert result["next"] == urls[i + 1:i + 2], f"{page_name}: next is {result['next']}"
        assert result["previous"] == urls[max(i - 1, 0):i], \
            f"{page_name}: previous is {result['previous']}"


def test_next_and_previous_links_take_the_reader_there(site, browser, pages):
    recorder = Recorder(browser, **DESKTOP)
    try:
        page = recorder.new_page()
        page.goto(site)  # index.html sends the reader on to the first page
        page.wait_for_url(site + pages[0] + ".html")
        for link, there in (("a.right-next", pages[1]), ("a.left-prev", pages[0])):
            with page.expect_navigation():
                page.locator(f".prev-next-area {link}").click()
            assert page.url == site + there + ".html"
        assert not recorder.outside and not recorder.errors, recorder.outside + recorder.errors
    finally:
        recorder.close()
