/* Attention heads (small-gpt article): the weights of one head of the trained site GPT over a passage, as a
   map (row = query, column = key) and, for one query, as shading over the passage's bytes. The numbers are
   computed when the site is built (docs/figures/small-gpt.py, DATA) and fetched from the same site; the
   previous-byte score and the weight on the first byte are computed here from them, as the article defines
   them. Without JavaScript, or if the numbers do not arrive, the static figure inside the widget stays. */
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs, children, ns) {
    const node = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children || []) node.append(child);
    return node;
  }

  function field(id, text, input, output) {
    return el("div", { class: "qkv-field" }, [el("label", { for: id }, [text]), input].concat(output ? [output] : []));
  }

  function select(id, count, word) {
    return el("select", { id }, Array.from({ length: count }, (_, i) => el("option", { value: i }, [word + " " + i])));
  }

  function shown(byte) {
    return byte === " " ? "space" : byte === "\n" ? "newline" : byte;
  }

  // The article's scores, on one head's rows (percent, keys 0..i): mean weight on key i - 1, and on key 0.
  function scores(rows) {
    let previous = 0, first = 0;
    for (let i = 1; i < rows.length; i++) {
      previous += rows[i][i - 1];
      first += rows[i][0];
    }
    return { previous: previous / (rows.length - 1), first: first / (rows.length - 1) };
  }

  function build(root, data) {
    const id = (name) => root.id + "-" + name;
    const L = data.bytes.length;
    const layer = select(id("layer"), data.percent.length, "layer");
    const head = select(id("head"), data.percent[0].length, "head");
    const query = el("input", { type: "range", id: id("query"), min: 0, max: L - 1, value: Math.floor(L / 2), step: 1 });
    const queryOut = el("output", { for: id("query") });
    const controls = el("div", { class: "qkv-controls" }, [
      field(id("query"), "Query (byte of the passage)", query, queryOut),
      field(id("layer"), "Layer", layer),
      field(id("head"), "Head", head),
    ]);
    const map = el("svg", { viewBox: `0 0 ${L} ${L}`, class: "qkv-attention-map", role: "img" }, [], SVG);
    const text = el("p", { class: "qkv-passage", "aria-hidden": "true" });
    const summary = el("p", { class: "qkv-summary", "aria-live": "polite" });
    root.replaceChildren(controls, el("div", { class: "qkv-grids" }, [map, text]), summary);

    function update() {
      const rows = data.percent[+layer.value][+head.value];
      const q = +query.value;
      queryOut.value = String(q);
      const cells = [];
      rows.forEach((row, i) =>
        row.forEach((w, j) => {
          if (w >= 0.5) cells.push(el("rect", { x: j, y: i, width: 1, height: 1, "fill-opacity": Math.sqrt(w / 100).toFixed(3) }, [], SVG));
        })
      );
      cells.push(el("rect", { x: 0, y: q, width: q + 1, height: 1, class: "qkv-query-row" }, [], SVG));
      map.replaceChildren(...cells);
      map.setAttribute("aria-label", `Attention map of layer ${layer.value}, head ${head.value}: row i is query i, darker keys get more weight`);
      text.replaceChildren(
        ...data.bytes.map((byte, j) => {
          const w = j <= q ? rows[q][j] : 0;
          const span = el("span", { class: j === q ? "qkv-query" : "" }, [byte === " " ? "\u00a0" : byte]);
          span.style.setProperty("--qkv-weight", (w / 100).toFixed(3));
          return span;
        })
      );
      const row = rows[q];
      const top = row.indexOf(Math.max(...row));
      const s = scores(rows);
      summary.textContent =
        `Query ${q} (${shown(data.bytes[q])}) gives ${row[top].toFixed(1)}% of its weight to byte ${top} ` +
        `(${shown(data.bytes[top])}). This head's previous-byte score: ${s.previous.toFixed(1)}%; ` +
        `weight on the first byte: ${s.first.toFixed(1)}%.`;
    }

    for (const input of [layer, head, query]) input.addEventListener("input", update);
    update();
  }

  function init() {
    for (const root of document.querySelectorAll(".qkv-attention-heads:not([data-ready])")) {
      root.setAttribute("data-ready", "");
      fetch(new URL(root.dataset.src, document.baseURI))
        .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
        .then((data) => build(root, data))
        .catch(() => root.removeAttribute("data-ready")); // the static figure stays
    }
  }

  init();
  if (!window.qkvAttentionHeads) {
    window.qkvAttentionHeads = init;
    // Material's instant navigation swaps the page in place: build the widget again on each new page.
    document.addEventListener("DOMContentLoaded", () => window.document$ && window.document$.subscribe(init));
  }
})();
