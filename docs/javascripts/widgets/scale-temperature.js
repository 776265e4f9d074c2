/* Scale and temperature (scaling article): one query and S keys with independent standard-normal entries,
   scores q . k * scale / t, their softmax, its entropy and effective number of keys, the gradient measure
   2 (1 - sum p^2) of the article and the size of dp/dq, the gradient that reaches the query.
   tests/browser/test_widgets.py reads the query and keys drawn (root.qkvInputs) and checks every number shown
   against qkv.attention_weights and torch.autograd. */
(function () {
  "use strict";

  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 320;
  const HEIGHT = 90;

  // A seeded generator (mulberry32) and Box-Muller: the same draw for the same seed, on every browser.
  function normals(seed, count) {
    let state = seed >>> 0;
    const uniform = () => {
      state = (state + 0x6d2b79f5) >>> 0;
      let x = Math.imul(state ^ (state >>> 15), state | 1);
      x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
      return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
    };
    const out = new Float64Array(count);
    for (let i = 0; i < count; i += 2) {
      const r = Math.sqrt(-2 * Math.log(1 - uniform()));
      const angle = 2 * Math.PI * uniform();
      out[i] = r * Math.cos(angle);
      if (i + 1 < count) out[i + 1] = r * Math.sin(angle);
    }
    return out;
  }

  function attend(query, keys, factor) {
    const scores = keys.map((k) => k.reduce((sum, x, e) => sum + x * query[e], 0) * factor);
    const top = Math.max(...scores);
    const exps = scores.map((s) => Math.exp(s - top));
    const total = exps.reduce((a, b) => a + b, 0);
    const p = exps.map((e) => e / total);
    const mean = scores.reduce((a, b) => a + b, 0) / scores.length;
    const spread = Math.sqrt(scores.reduce((a, s) => a + (s - mean) ** 2, 0) / (scores.length - 1));
    const entropy = -p.reduce((a, w) => a + (w > 0 ? w * Math.log(w) : 0), 0);
    // dp_i/dq = factor * p_i (k_i - sum_j p_j k_j): rows of (diag p - p p^T) K, times the factor.
    const pooled = query.map((_, e) => keys.reduce((a, k, j) => a + p[j] * k[e], 0));
    let norm = 0;
    keys.forEach((k, i) => k.forEach((x, e) => (norm += (factor * p[i] * (x - pooled[e])) ** 2)));
    return {
      scores, p, spread, entropy,
      max: Math.max(...p),
      effective: Math.exp(entropy),
      jacobian: 2 * (1 - p.reduce((a, w) => a + w * w, 0)),
      toQuery: Math.sqrt(norm),
    };
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

  // Bars of `values` (sorted by the caller), from a baseline at `zero` (0..1 of the height).
  function bars(title, values, limit, zero) {
    const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "qkv-bars", role: "img", "aria-label": title });
    const step = WIDTH / values.length;
    const base = HEIGHT * (1 - zero);
    values.forEach((v, j) => {
      const h = (Math.min(Math.abs(v), limit) / limit) * HEIGHT * (zero > 0 ? 0.5 : 1);
      chart.append(svg("rect", { x: j * step + step * 0.1, width: step * 0.8, y: v >= 0 ? base - h : base, height: Math.max(h, 0.5), class: "qkv-bar" }));
    });
    chart.append(svg("line", { x1: 0, x2: WIDTH, y1: base, y2: base, class: "qkv-axis" }));
    return el("figure", { class: "qkv-chart" }, [chart, el("figcaption", {}, [title])]);
  }

  function build(root) {
    const id = (name) => root.id + "-" + name;
    const dk = el("select", { id: id("dk") }, [4, 16, 64, 256, 1024].map((d) => el("option", { value: d }, [String(d)])));
    dk.value = "64";
    const scaled = el("select", { id: id("scaled") }, [el("option", { value: "yes" }, ["divided by √d_k"]), el("option", { value: "no" }, ["raw q · k"])]);
    const temperature = el("input", { type: "range", id: id("temperature"), min: 0.25, max: 4, step: 0.25, value: 1 });
    const keysCount = el("input", { type: "range", id: id("keys"), min: 2, max: 32, step: 1, value: 16 });
    const outputs = [el("output", { for: temperature.id }), el("output", { for: keysCount.id })];
    const redraw = el("button", { type: "button", id: id("redraw") }, ["New random q and K"]);
    const controls = el("div", { class: "qkv-controls" }, [
      field(dk, "Head width d_k"), field(scaled, "Scores"),
      field(temperature, "Temperature t (scores / t)", outputs[0]), field(keysCount, "Keys S", outputs[1]),
      el("div", { class: "qkv-field" }, [redraw]),
    ]);
    const charts = el("div", { class: "qkv-charts" });
    const rows = ["score spread (std)", "largest weight", "entropy (nats)", "effective keys e^H", "gradient measure 2(1 − Σp²)", "‖∂p/∂q‖"];
    const cells = rows.map(() => el("td"));
    const numbers = el("table", { class: "qkv-numbers" }, [
      el("caption", {}, ["This draw"]),
      el("tbody", {}, rows.map((name, i) => el("tr", {}, [el("th", { scope: "row" }, [name]), cells[i]]))),
    ]);
    const summary = el("p", { class: "qkv-summary", "aria-live": "polite" });
    root.replaceChildren(controls, el("div", { class: "qkv-grids" }, [charts, numbers]), summary);
    let seed = 1;

    function update() {
      const d = +dk.value;
      const S = +keysCount.value;
      const t = +temperature.value;
      outputs[0].value = t.toFixed(2);
      outputs[1].value = String(S);
      const draw = normals(seed, d * (S + 1));
      const query = Array.from(draw.subarray(0, d));
      const keys = Array.from({ length: S }, (_, j) => Array.from(draw.subarray(d * (j + 1), d * (j + 2))));
      const factor = (scaled.value === "yes" ? 1 / Math.sqrt(d) : 1) / t;
      root.qkvInputs = { query, keys, factor };
      const r = attend(query, keys, factor);
      const order = r.p.map((_, j) => j).sort((a, b) => r.p[b] - r.p[a]);
      const limit = Math.max(...r.scores.map(Math.abs), 1e-9);
      charts.replaceChildren(
        bars(`Scores, largest weight first (bars to ±${limit.toFixed(1)})`, order.map((j) => r.scores[j]), limit, 0.5),
        bars("Softmax weights, same order (bars to 1)", order.map((j) => r.p[j]), 1, 0),
      );
      const shown = [r.spread, r.max, r.entropy, r.effective, r.jacobian, r.toQuery];
      shown.forEach((x, i) => (cells[i].textContent = x.toPrecision(3)));
      summary.textContent = `d_k ${d}, ${scaled.value === "yes" ? "scaled" : "raw"}, t ${t.toFixed(2)}, ${S} keys: largest weight ${r.max.toPrecision(3)}, effective keys ${r.effective.toPrecision(3)} of ${S}.`;
    }

    redraw.addEventListener("click", () => {
      seed += 1;
      update();
    });
    for (const input of [dk, scaled, temperature, keysCount]) input.addEventListener("input", update);
    update();
  }

  function init() {
    for (const root of document.querySelectorAll(".qkv-scale-temperature:not([data-ready])")) {
      root.setAttribute("data-ready", "");
      build(root);
    }
  }

  init();
  if (!window.qkvScaleTemperature) {
    window.qkvScaleTemperature = init;
    // Material's instant navigation swaps the page in place: build the widget again on each new page.
    document.addEventListener("DOMContentLoaded", () => window.document$ && window.document$.subscribe(init));
  }
})();
