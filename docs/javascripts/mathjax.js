// MathJax 3, self-hosted under assets/mathjax/ (copied there at build time by docs/hooks/mathjax_assets.py) and
// loaded only when a page has math. Math reaches MathJax in three places: `pymdownx.arithmatex` (generic) wraps
// Markdown math in `.arithmatex` elements as \( \) and \[ \]; mkdocs-jupyter leaves notebook Markdown cells'
// $ $ and $$ $$ as they are, inside `.jp-MarkdownOutput`; a heading with math reaches the table of contents as
// plain \( \) text. Only those elements are typeset, so a dollar sign anywhere else stays a dollar sign.
(function () {
  const base = new URL("../assets/mathjax/", document.currentScript.src).href;
  const MATH = ".arithmatex, .jp-MarkdownOutput, .md-nav--secondary .md-nav__link";
  const DELIMITERS = /\\\(|\\\[|\$|\\begin\{/;

  window.MathJax = {
    loader: { paths: { mathjax: base.replace(/\/$/, "") } },
    tex: {
      inlineMath: [["\\(", "\\)"], ["$", "$"]],
      displayMath: [["\\[", "\\]"], ["$$", "$$"]],
      processEscapes: true,
      processEnvironments: true,
    },
    // Material's instant navigation swaps the page in without reloading scripts: typeset on each `document$`.
    startup: { typeset: false },
  };

  // Instant navigation keeps only the <head> elements that the new page has, which drops the <style> elements
  // MathJax added. Put the context menu's back (their rules are plain text); the CHTML sheet, whose rules
  // MathJax inserts one by one, is rebuilt before the next typeset instead.
  new MutationObserver((records) => {
    for (const node of records.flatMap((record) => [...record.removedNodes])) {
      if (node.nodeName === "STYLE" && node.id !== "MJX-CHTML-styles") {
        document.head.appendChild(node);
      }
    }
  }).observe(document.head, { childList: true });

  let loading = null;
  function load() {
    if (loading === null) {
      loading = new Promise((resolve, reject) => {
        const script = document.createElement("script");
        script.src = base + "tex-mml-chtml.js";
        script.async = true;
        script.onload = resolve;
        script.onerror = () => reject(new Error("MathJax failed to load from " + script.src));
        document.head.appendChild(script);
      }).then(() => window.MathJax.startup.promise);
    }
    return loading;
  }

  document$.subscribe(() => {
    const elements = [...document.querySelectorAll(MATH)].filter((el) => DELIMITERS.test(el.textContent));
    if (elements.length === 0) {
      return;
    }
    load().then(() => {
      // Chain on startup.promise so that a typeset started by an earlier page finishes first.
      MathJax.startup.promise = MathJax.startup.promise
        .then(() => {
          // The CHTML sheet left with the old page's <head>: let the typeset write a complete new one.
          if (!document.getElementById("MJX-CHTML-styles")) {
            MathJax.startup.output.clearCache();
          }
          MathJax.typesetClear();
          MathJax.texReset();
          return MathJax.typesetPromise(elements);
        })
        .catch((error) => console.error(error));
    }, (error) => console.error(error));
  });
})();
