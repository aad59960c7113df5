/* Loaded on every page by _ext/course_html.py.

   Display maths and tables that are wider than the column scroll inside their own box
   (course.css). A phone hides scroll bars until the reader touches the box, so nothing
   would say that there is more to the right: this script marks every such box that does
   scroll (class course-scrolls: a shadow on the hidden side, a visible scroll bar) and puts
   the hint "scroll sideways" under it. It runs when the page loads, again when MathJax has
   typeset the maths, and when the window changes size. tests/test_browser.py checks that
   every box that scrolls at 390 px has both.

   Figures of executed cells (matplotlib, drawn for the desktop column) go in a box of their
   own, div.course-figure-scroll: on a phone course.css shows them at full size instead of
   shrinking their text below what can be read, and the box scrolls, marked the same way. */
(function () {
  "use strict";
  var BOXES = ".bd-article div.math mjx-container[display='true'], " +
              ".bd-article .pst-scrollable-table-container, .bd-article .course-figure-scroll";

  function boxFigures() {
    document.querySelectorAll(".bd-article .cell_output img").forEach(function (img) {
      if (img.parentElement.classList.contains("course-figure-scroll")) return;
      var box = document.createElement("div");
      box.className = "course-figure-scroll";
      img.insertAdjacentElement("beforebegin", box);
      box.appendChild(img);
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
