/* Soft lookup (queries-keys-values article): a query moved in 2-D among the keys of the article's first
   block; the scores q . k * scale, the weights softmax(scores) and the output sum_j w_j v_j, as
   qkv.attention_weights and qkv.scaled_dot_product_attention compute them. The keys and values are read from
   the widget's data attributes; tests/browser/test_widgets.py checks the numbers shown against qkv. */
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  const RANGE = 2; // the plane shows [-2, 2] x [-2, 2]
  const SIZE = 240; // viewBox units
  const toX = (x) => ((x + RANGE) / (2 * RANGE)) * SIZE;
  const toY = (y) => ((RANGE - y) / (2 * RANGE)) * SIZE;

  function lookup(query, keys, values, scale) {
    const scores = keys.map((k) => (query[0] * k[0] + query[1] * k[1]) * scale);
    const top = Math.max(...scores); // subtract the largest score: exp never overflows
    const exps = scores.map((s) => Math.exp(s - top));
    const total = exps.reduce((a, b) => a + b, 0);
    const weights = exps.map((e) => e / total);
    const output = weights.reduce((sum, w, j) => sum + w * values[j], 0);
    return { scores, weights, output };
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children || []) node.append(child);
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    return node;
  }

  function field(input, text, output) {
    return el("div", { class: "qkv-field" }, [el("label", { for: input.id }, [text]), input].concat(output ? [output] : []));
  }

  function build(root) {
    const keys = JSON.parse(root.dataset.keys);
    const values = JSON.parse(root.dataset.values);
    const id = (name) => root.id + "-" + name;
    const sliders = ["x", "y"].map((axis, i) => {
      const input = el("input", { type: "range", id: id(axis), min: -RANGE, max: RANGE, step: 0.1, value: [0.9, 0.1][i] });
      return { input, output: el("output", { for: input.id }) };
    });
    const scale = el("select", { id: id("scale") }, [
      el("option", { value: "1" }, ["1 (as in the block above)"]),
      el("option", { value: String(1 / Math.sqrt(2)) }, ["1/√d_k = 1/√2"]),
    ]);
    const controls = el("div", { class: "qkv-controls" }, [
      field(sliders[0].input, "Query x", sliders[0].output),
      field(sliders[1].input, "Query y", sliders[1].output),
      field(scale, "Scale"),
    ]);

    const plane = svg("svg", { viewBox: `-16 -8 ${SIZE + 32} ${SIZE + 16}`, class: "qkv-plane", role: "img", "aria-label": "The query and the keys in the plane; drag the query, or use the sliders" });
    plane.append(svg("line", { x1: 0, x2: SIZE, y1: toY(0), y2: toY(0), class: "qkv-axis" }));
    plane.append(svg("line", { x1: toX(0), x2: toX(0), y1: 0, y2: SIZE, class: "qkv-axis" }));
    const keyDots = keys.map((k, j) => {
      const dot = svg("circle", { cx: toX(k[0]), cy: toY(k[1]), class: "qkv-key" });
      const label = svg("text", { x: toX(k[0]) + 9, y: toY(k[1]) - 9, class: "qkv-label" });
      label.textContent = `k${j} (v=${values[j]})`;
      plane.append(dot, label);
      return dot;
    });
    const ray = svg("line", { x1: toX(0), y1: toY(0), class: "qkv-ray" });
    const handle = svg("circle", { r: 7, class: "qkv-query" });
    const handleLabel = svg("text", { class: "qkv-label" });
    handleLabel.textContent = "q";
    plane.append(ray, handle, handleLabel);

    const body = el("tbody");
    const output = el("output", { class: "qkv-output" });
    const numbers = el("table", { class: "qkv-lookup" }, [
      el("caption", {}, ["Scores, weights and the output"]),
      el("thead", {}, [el("tr", {}, ["key", "score", "weight", "value"].map((t) => el("th", { scope: "col" }, [t])))]),
      body,
    ]);
    const summary = el("p", { class: "qkv-summary", "aria-live": "polite" });
    root.replaceChildren(controls, el("div", { class: "qkv-grids" }, [plane, el("div", {}, [numbers, el("p", {}, ["output = ", output])])]), summary);

    function update() {
      const query = sliders.map((s) => +s.input.value);
      sliders.forEach((s, i) => (s.output.value = query[i].toFixed(1)));
      const r = lookup(query, keys, values, +scale.value);
      keyDots.forEach((dot, j) => dot.setAttribute("r", (3 + 12 * Math.sqrt(r.weights[j])).toFixed(2)));
      handle.setAttribute("cx", toX(query[0]));
      handle.setAttribute("cy", toY(query[1]));
      ray.setAttribute("x2", toX(query[0]));
      ray.setAttribute("y2", toY(query[1]));
      handleLabel.setAttribute("x", toX(query[0]) - 18);
      handleLabel.setAttribute("y", toY(query[1]) - 8);
      body.replaceChildren(...keys.map((_, j) => el("tr", {}, [
        el("th", { scope: "row" }, ["k" + j]),
        el("td", {}, [r.scores[j].toFixed(2)]),
        el("td", {}, [r.weights[j].toFixed(2)]),
        el("td", {}, [String(values[j])]),
      ])));
      output.value = r.output.toFixed(2);
      summary.textContent = `Query (${query.map((x) => x.toFixed(1)).join(", ")}): weights ${r.weights.map((w) => w.toFixed(2)).join(", ")}; output ${r.output.toFixed(2)}.`;
    }

    // Pointer: press anywhere on the plane to put the query there, drag to move it. Keyboard: the sliders.
    function place(event) {
      const point = plane.createSVGPoint();
      point.x = event.clientX;
      point.y = event.clientY;
      const p = point.matrixTransform(plane.getScreenCTM().inverse());
      const coords = [(p.x / SIZE) * 2 * RANGE - RANGE, RANGE - (p.y / SIZE) * 2 * RANGE];
      sliders.forEach((s, i) => (s.input.value = String(Math.max(-RANGE, Math.min(RANGE, coords[i])).toFixed(1))));
      update();
    }
    plane.addEventListener("pointerdown", (event) => {
      plane.setPointerCapture(event.pointerId);
      place(event);
    });
    plane.addEventListener("pointermove", (event) => plane.hasPointerCapture(event.pointerId) && place(event));
    for (const input of root.querySelectorAll("input, select")) input.addEventListener("input", update);
    update();
  }

  function init() {
    for (const root of document.querySelectorAll(".qkv-soft-lookup:not([data-ready])")) {
      root.setAttribute("data-ready", "");
      build(root);
    }
  }

  init();
  if (!window.qkvSoftLookup) {
    window.qkvSoftLookup = init;
    // Material's instant navigation swaps the page in place: build the widget again on each new page.
    document.addEventListener("DOMContentLoaded", () => window.document$ && window.document$.subscribe(init));
  }
})();
