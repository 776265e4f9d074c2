/* Online softmax stepper (FlashAttention article): one block of queries visits the key tiles one at a time
   and keeps, per row, the running maximum m, the running sum l and the unnormalised output o, rescaled by
   alpha = exp(m_old - m_new) whenever m grows. Tiles the causal mask empties are skipped, as the kernel
   skips them (qkv.kernels.tiles). The queries, keys and values are the widget's data attributes;
   tests/browser/test_widgets.py checks every number against qkv.scaled_dot_product_attention and the tile
   kinds against qkv.kernels.tiles.classify_tiles. */
(function () {
  "use strict";

  const BLOCK_M = 4;
  const BLOCK_N = 2;

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children || []) node.append(child);
    return node;
  }

  function field(input, text, output) {
    return el("div", { class: "qkv-field" }, [el("label", { for: input.id }, [text]), input].concat(output ? [output] : []));
  }

  const keeps = (causal, i, j) => !causal || j <= i;

  // A tile is empty when no pair in it is kept, full when every pair is, partial otherwise.
  function kind(rows, cols, causal) {
    const kept = rows.flatMap((i) => cols.map((j) => keeps(causal, i, j)));
    return kept.every(Boolean) ? "full" : kept.some(Boolean) ? "partial" : "empty";
  }

  function format(x) {
    if (x === null) return "—";
    if (x === -Infinity) return "−∞";
    return x.toFixed(3);
  }

  function build(root) {
    const q = JSON.parse(root.dataset.queries);
    const k = JSON.parse(root.dataset.keys);
    const v = JSON.parse(root.dataset.values);
    const scale = 1 / Math.sqrt(q[0].length);
    const tiles = Math.ceil(k.length / BLOCK_N);
    const id = (name) => root.id + "-" + name;
    const block = el("select", { id: id("block") }, Array.from({ length: Math.ceil(q.length / BLOCK_M) }, (_, b) =>
      el("option", { value: b }, [`queries ${b * BLOCK_M}–${Math.min(q.length, (b + 1) * BLOCK_M) - 1}`])));
    const mask = el("select", { id: id("mask") }, [el("option", { value: "causal" }, ["causal"]), el("option", { value: "none" }, ["none"])]);
    const step = el("input", { type: "range", id: id("step"), min: 0, max: tiles, step: 1, value: 0 });
    const stepOut = el("output", { for: step.id });
    const next = el("button", { type: "button", id: id("next") }, ["Next key tile"]);
    const controls = el("div", { class: "qkv-controls" }, [
      field(block, "Query block"), field(mask, "Mask"),
      field(step, `Key tiles visited (of ${tiles})`, stepOut), el("div", { class: "qkv-field" }, [next]),
    ]);
    const strip = el("ol", { class: "qkv-tiles", "aria-label": "Key tiles of this query block" });
    const body = el("tbody");
    const table = el("table", { class: "qkv-online" }, [
      el("caption", {}, ["Running state of each query row"]),
      el("thead", {}, [el("tr", {}, ["row", "m", "α (last tile)", "ℓ", "o", "o / ℓ"].map((t) => el("th", { scope: "col" }, [t])))]),
      body,
    ]);
    const summary = el("p", { class: "qkv-summary", "aria-live": "polite" });
    root.replaceChildren(controls, strip, table, summary);

    function update() {
      const b = +block.value;
      const causal = mask.value === "causal";
      const visited = +step.value;
      stepOut.value = String(visited);
      next.disabled = visited === tiles;
      const rows = Array.from({ length: BLOCK_M }, (_, r) => b * BLOCK_M + r).filter((i) => i < q.length);
      const kinds = Array.from({ length: tiles }, (_, t) =>
        kind(rows, Array.from({ length: BLOCK_N }, (_, c) => t * BLOCK_N + c).filter((j) => j < k.length), causal));
      strip.replaceChildren(...kinds.map((kd, t) => el("li", {
        class: `qkv-tile qkv-tile--${kd}` + (t < visited ? " qkv-tile--done" : "") + (t === visited - 1 ? " qkv-tile--current" : ""),
      }, [`keys ${t * BLOCK_N}–${Math.min(k.length, (t + 1) * BLOCK_N) - 1}: ${kd === "empty" ? "skipped" : kd}`])));
      const states = rows.map((i) => {
        let m = -Infinity, l = 0, o = 0, alpha = null;
        for (let t = 0; t < visited; t++) {
          if (kinds[t] === "empty") { alpha = null; continue; }
          const scores = [];
          for (let j = t * BLOCK_N; j < Math.min(k.length, (t + 1) * BLOCK_N); j++) {
            if (keeps(causal, i, j)) scores.push([q[i].reduce((a, x, e) => a + x * k[j][e], 0) * scale, j]);
          }
          const mNew = Math.max(m, ...scores.map(([s]) => s));
          alpha = mNew === -Infinity ? null : Math.exp(m - mNew);
          const rescale = alpha === null ? 1 : alpha;
          l = rescale * l + scores.reduce((a, [s]) => a + Math.exp(s - mNew), 0);
          o = rescale * o + scores.reduce((a, [s, j]) => a + Math.exp(s - mNew) * v[j], 0);
          m = mNew;
        }
        return { i, m, alpha, l, o, out: l > 0 ? o / l : null };
      });
      body.replaceChildren(...states.map((s) => el("tr", {}, [
        el("th", { scope: "row" }, ["q" + s.i]),
        ...[s.m, s.alpha, s.l, s.o, s.out].map((x) => el("td", {}, [format(x)])),
      ])));
      const skipped = kinds.filter((kd) => kd === "empty").length;
      summary.textContent = visited === 0
        ? `Nothing visited yet: m = −∞, ℓ = 0, o = 0. ${skipped} of ${tiles} tiles will be skipped.`
        : `After tile ${visited} (${kinds[visited - 1] === "empty" ? "skipped" : kinds[visited - 1]}): o / ℓ of q${rows[0]} is ${format(states[0].out)}.`;
    }

    next.addEventListener("click", () => {
      step.value = String(Math.min(tiles, +step.value + 1));
      update();
    });
    for (const input of [block, mask, step]) input.addEventListener("input", update);
    update();
  }

  function init() {
    for (const root of document.querySelectorAll(".qkv-online-softmax:not([data-ready])")) {
      root.setAttribute("data-ready", "");
      build(root);
    }
  }

  init();
  if (!window.qkvOnlineSoftmax) {
    window.qkvOnlineSoftmax = init;
    // Material's instant navigation swaps the page in place: build the widget again on each new page.
    document.addEventListener("DOMContentLoaded", () => window.document$ && window.document$.subscribe(init));
  }
})();
