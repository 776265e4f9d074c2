// Typeset TeX to CommonHTML with MathJax, for docs/hooks/mathjax.py, once per site build.
//
// Reads one JSON request per line on stdin and answers each with one JSON line on stdout:
//   {"tex": "...", "display": true|false}  ->  {"html": "<mjx-container ...>"} or {"error": "..."}
//   {"css": true}                          ->  {"css": "..."}: the styles of every formula typeset so far
// The output carries assistive MathML for screen readers. `fontURL` (argv[2]) is where the stylesheet finds
// MathJax's woff-v2 fonts, relative to the stylesheet.
//
// Two attributes that MathJax writes on every formula are left out, as no browser reads them in an HTML page:
// `xmlns` on <math> (the HTML parser puts <math> in the MathML namespace by itself) and `unselectable` on the
// assistive MathML (old Internet Explorer's; MathJax's stylesheet sets `user-select: none` there). Together
// 60 bytes a formula: 9 KB of the FlashAttention article.
const readline = require("readline");
const { mathjax } = require("mathjax-full/js/mathjax.js");
const { TeX } = require("mathjax-full/js/input/tex.js");
const { CHTML } = require("mathjax-full/js/output/chtml.js");
const { liteAdaptor } = require("mathjax-full/js/adaptors/liteAdaptor.js");
const { RegisterHTMLHandler } = require("mathjax-full/js/handlers/html.js");
const { AssistiveMmlHandler } = require("mathjax-full/js/a11y/assistive-mml.js");
const { AllPackages } = require("mathjax-full/js/input/tex/AllPackages.js");

const adaptor = liteAdaptor();
AssistiveMmlHandler(RegisterHTMLHandler(adaptor));
const document = mathjax.document("", {
  InputJax: new TeX({ packages: AllPackages }),
  OutputJax: new CHTML({ fontURL: process.argv[2] }),
});

function answer(request) {
  if (request.css) {
    return { css: adaptor.textContent(document.outputJax.styleSheet(document)) };
  }
  const container = document.convert(request.tex, { display: request.display });
  for (const math of adaptor.tags(container, "math")) adaptor.removeAttribute(math, "xmlns");
  for (const mml of adaptor.tags(container, "mjx-assistive-mml")) adaptor.removeAttribute(mml, "unselectable");
  const html = adaptor.outerHTML(container);
  const error = html.match(/data-mjx-error="([^"]*)"/);
  return error ? { error: error[1] } : { html };
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  process.stdout.write(JSON.stringify(answer(JSON.parse(line))) + "\n");
});
