/* Loaded on every page by _ext/course_html.py.

   Display maths and tables that are wider than the column scroll inside their own box
   (course.css). A phone hides scroll bars until the reader touches the box, so nothing
   would say that there is more to the right: this script marks every such box that does
   scroll (class course-scrolls: a shadow on the hidden side, a visible scroll bar) and puts
   the hint "scroll sideways" under it. It runs when the page loads, again when MathJax has
   typeset the maths, and when the window changes size. tests/test_browser.py checks that
   every box that scrolls at 390 px has both.

   Figures of executed cells (matplotlib, drawn for the desktop column) go in a box of their
   own, div.course-figure-scroll. Each shrinks with the column only as far as its smallest
   text stays at 70% of the body text (the floor tests/test_browser.py checks at every
   width): its SVG is read for the sizes of its texts, which set the image's min-width.
   Narrower than that, the figure keeps that width and its box scrolls, marked the same way. */
(function () {
  "use strict";
  var BOXES = ".bd-article div.math mjx-container[display='true'], " +
              ".bd-article .pst-scrollable-table-container, .bd-article .course-figure-scroll";

  var FLOOR = 0.7;  // the smallest figure text, as a fraction of the body text's size

  // The size of an SVG text as drawn: that of its largest glyphs (a formula's subscripts
  // are smaller, as in the body text's own maths), in the SVG's units.
  function textSize(text) {
    var spans = [].filter.call(text.querySelectorAll("tspan"),
                               function (s) { return s.textContent.trim(); });
    var sized = spans.length ? spans : [text];
    return Math.max.apply(null, sized.map(function (e) {
      return parseFloat(getComputedStyle(e).fontSize);
    }));
  }

  // The least width at which the figure's smallest text is FLOOR times the body text (never
  // more than the width it was drawn at), set as its min-width; data-course-floor="done".
  function keepReadable(img) {
    if (img.dataset.courseFloor) return;
    img.dataset.courseFloor = "pending";
    var done = function () { img.dataset.courseFloor = "done"; mark(); };
    if (!/\.svg(\?|#|$)/i.test(img.getAttribute("src") || "")) { done(); return; }
    fetch(img.src).then(function (response) { return response.text(); }).then(function (source) {
      var parsed = new DOMParser().parseFromString(source, "image/svg+xml").documentElement;
      var holder = document.createElement("div");  // placed, hidden, so that styles apply
      holder.style.cssText = "position:absolute; left:-100000px; top:0; visibility:hidden";
      var svg = document.importNode(parsed, true);
      holder.appendChild(svg);
      document.body.appendChild(holder);
      var units = svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width
        ? svg.viewBox.baseVal.width : svg.width.baseVal.value;
      var drawn = svg.width.baseVal.value;  // px: the image's natural width
      var sizes = [].filter.call(svg.querySelectorAll("text"),
                                 function (t) { return t.textContent.trim(); }).map(textSize);
      holder.remove();
      var body = parseFloat(getComputedStyle(
        document.querySelector(".bd-article p") || document.body).fontSize);
      var smallest = Math.min.apply(null, sizes);
      if (sizes.length && smallest > 0 && units > 0 && drawn > 0)
        img.style.minWidth = Math.min(Math.ceil(FLOOR * body * units / smallest), drawn) + "px";
    }).catch(function () {}).then(done);
  }

  function boxFigures() {
    document.querySelectorAll(".bd-article .cell_output img").forEach(function (img) {
      if (!img.parentElement.classList.contains("course-figure-scroll")) {
        var box = document.createElement("div");
        box.className = "course-figure-scroll";
        img.insertAdjacentElement("beforebegin", box);
        box.appendChild(img);
      }
      keepReadable(img);
    });
  }

  function mark() {
    boxFigures();
    document.querySelectorAll(BOXES).forEach(function (box) {
      var scrolls = box.scrollWidth > box.clientWidth + 1;
      var anchor = box.matches("mjx-container") ? box.closest("div.math") : box;
      var hint = anchor.nextElementSibling;
      var hasHint = hint && hint.classList.contains("course-scroll-hint");
      box.classList.toggle("course-scrolls", scrolls);
      if (scrolls && !hasHint) {
        hint = document.createElement("span");
        hint.className = "course-scroll-hint";
        hint.setAttribute("aria-hidden", "true");
        hint.textContent = "\u2194 scroll sideways for the rest";
        anchor.insertAdjacentElement("afterend", hint);
      } else if (!scrolls && hasHint) {
        hint.remove();
      }
    });
  }

  function afterMathJax(tries) {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(mark);
    } else if (tries > 0) {
      setTimeout(function () { afterMathJax(tries - 1); }, 100);
    }
  }

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(mark, 150);
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mark);
  } else {
    mark();
  }
  window.addEventListener("load", mark);
  afterMathJax(100);
})();
