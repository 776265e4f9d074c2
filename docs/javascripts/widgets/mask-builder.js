/* Mask builder (masking article): the keep mask of qkv.causal_mask / qkv.sliding_window_mask and
   qkv.padding_mask for small L and S, shown in four conventions, with the attention weights each one gives
   when every score is 0. tests/browser/test_widgets.py checks the numbers shown against qkv and torch. */
(function () {
  "use strict";

  const CONVENTIONS = {
    sdpa: { label: "qkv / F.scaled_dot_product_attention: bool, True = may attend", mask: "T = may attend", keep: "T", drop: "F", empty: "zeros" },
    mha: { label: "nn.MultiheadAttention: bool, True = ignore", mask: "T = ignore", keep: "F", drop: "T", empty: "NaN" },
    inf: { label: "additive −inf, then torch.softmax", mask: "added to the scores", keep: "0", drop: "−∞", empty: "NaN" },
    min: { label: "additive finfo.min, then torch.softmax", mask: "added to the scores", keep: "0", drop: "min", empty: "uniform" },
  };

  // qkv.causal_mask / qkv.sliding_window_mask: query i sees keys last - window < j <= last, last = i + offset.
  function keepMask(s) {
    const offset = s.alignment === "bottom_right" ? s.S - s.L : 0;
    const rows = [];
    for (let i = 0; i < s.L; i++) {
      const row = [];
      for (let j = 0; j < s.S; j++) {
        const last = i + offset;
        let keep = s.alignment === "none" || (j <= last && (s.window === 0 || j > last - s.window));
        // qkv.padding_mask: the first `real` keys are tokens; left padding puts them last.
        const token = s.side === "right" ? j < s.real : j >= s.S - s.real;
        row.push(keep && token);
      }
      rows.push(row);
    }
    return rows;
  }

  // softmax of an all-zero score row under each convention: 1/n on the n kept keys.
  function weights(row, convention) {
    const n = row.filter(Boolean).length;
    if (n > 0) return row.map((keep) => (keep ? 1 / n : 0));
    if (convention === "sdpa") return row.map(() => 0);
    if (convention === "min") return row.map(() => 1 / row.length);
    return row.map(() => NaN);
  }

  function format(x) {
    return Number.isNaN(x) ? "NaN" : x === 0 ? "0" : x.toFixed(2);
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children || []) node.append(child);
    return node;
  }

  function slider(id, text, min, max, value) {
    const input = el("input", { type: "range", id, min, max, value, step: 1 });
    const output = el("output", { for: id }, [String(value)]);
    return { input, output, field: el("div", { class: "qkv-field" }, [el("label", { for: id }, [text]), input, output]) };
  }

  function select(id, text, options, value) {
    const input = el("select", { id }, Object.entries(options).map(([v, t]) => el("option", { value: v }, [t])));
    input.value = value;
    return { input, field: el("div", { class: "qkv-field" }, [el("label", { for: id }, [text]), input]) };
  }

  function table(className, caption, grid, cell) {
    const head = el("tr", {}, [el("td")].concat(grid[0].map((_, j) => el("th", { scope: "col" }, ["k" + j]))));
    const body = grid.map((row, i) =>
      el("tr", {}, [el("th", { scope: "row" }, ["q" + i])].concat(row.map((value, j) => cell(value, i, j))))
    );
    return el("table", { class: className }, [el("caption", {}, [caption]), el("thead", {}, [head]), el("tbody", {}, body)]);
  }

  function build(root) {
    const id = (name) => root.id + "-" + name;
    const L = slider(id("queries"), "Queries L", 1, 8, 5);
    const S = slider(id("keys"), "Keys S", 1, 8, 5);
    const real = slider(id("real"), "Real keys (the rest is padding)", 0, 5, 3);
    const side = select(id("side"), "Padding side", { right: "right", left: "left" }, "left");
    const alignment = select(id("alignment"), "Causal", { none: "none", top_left: "top-left (is_causal)", bottom_right: "bottom-right" }, "top_left");
    const window_ = slider(id("window"), "Sliding window (0 = off)", 0, 8, 0);
    const convention = select(id("convention"), "Convention", Object.fromEntries(Object.entries(CONVENTIONS).map(([k, c]) => [k, c.label])), "sdpa");
    const controls = el("div", { class: "qkv-controls" }, [L.field, S.field, real.field, side.field, alignment.field, window_.field, convention.field]);
    const grids = el("div", { class: "qkv-grids" });
    const summary = el("p", { class: "qkv-summary", "aria-live": "polite" });
    root.replaceChildren(controls, grids, summary);

    function update() {
      real.input.max = S.input.value;
      window_.input.disabled = alignment.input.value === "none";
      const s = {
        L: +L.input.value, S: +S.input.value, real: +real.input.value, side: side.input.value,
        alignment: alignment.input.value, window: +window_.input.value,
      };
      for (const [control, value] of [[L, s.L], [S, s.S], [real, s.real], [window_, s.window]]) control.output.value = String(value);
      const c = CONVENTIONS[convention.input.value];
      const keep = keepMask(s);
      const mask = table("qkv-mask", "Mask (" + c.mask + ")", keep, (k) =>
        el("td", { class: k ? "qkv-keep" : "qkv-drop" }, [k ? c.keep : c.drop]));
      const w = keep.map((row) => weights(row, convention.input.value));
      const probs = table("qkv-weights", "Weights when every score is 0", w, (x, i) =>
        el("td", { class: keep[i].some(Boolean) ? "" : "qkv-empty" }, [format(x)]));
      grids.replaceChildren(mask, probs);
      const empty = keep.map((row, i) => (row.some(Boolean) ? null : "q" + i)).filter(Boolean);
      summary.textContent = empty.length
        ? `${empty.length} of ${s.L} queries have no key (${empty.join(", ")}): their weights come out as ${c.empty}.`
        : `Every query has at least one key; each kept key gets 1/n of the weight.`;
    }

    for (const input of root.querySelectorAll("input, select")) input.addEventListener("input", update);
    update();
  }

  function init() {
    for (const root of document.querySelectorAll(".qkv-mask-builder:not([data-ready])")) {
      root.setAttribute("data-ready", "");
      build(root);
    }
  }

  init();
  if (!window.qkvMaskBuilder) {
    window.qkvMaskBuilder = init;
    // Material's instant navigation swaps the page in place: build the widget again on each new page.
    document.addEventListener("DOMContentLoaded", () => window.document$ && window.document$.subscribe(init));
  }
})();
