/* Material's search fetches the whole site's index (search/search_index.json: 430 KB of JSON, 120 KB
   gzipped, nearly half of what an article costs a first-time reader) as every page loads, and parses it on
   the main thread, though few visits search. This holds that one request back until the reader opens
   search, or arrives from a search result (`?h=`: Material highlights the words searched for). Loaded before
   Material's bundle (docs/overrides/main.html): the bundle asks for the index through XMLHttpRequest as it
   starts. Zensical's bundle asks the same way for its own index, `search.json` at the site's root: either
   is held. tests/browser/test_interactions.py checks both halves: no index at load, results once opened. */
(() => {
  const wanted = new Promise((release) => {
    if (new URLSearchParams(location.search).has("h")) release();
    document.addEventListener("focusin", (event) => event.target.closest?.(".md-search") && release());
    document.addEventListener("change", (event) => event.target.id === "__search" && release());
  });
  const held = new WeakSet();
  const { open, send } = XMLHttpRequest.prototype;
  const INDEXES = ["/search/search_index.json", "/search.json"]; // Material's, Zensical's
  XMLHttpRequest.prototype.open = function (method, url, ...rest) {
    if (INDEXES.some((index) => String(url).endsWith(index))) held.add(this);
    return open.call(this, method, url, ...rest);
  };
  XMLHttpRequest.prototype.send = function (...body) {
    if (!held.has(this)) return send.apply(this, body);
    wanted.then(() => send.apply(this, body));
  };
})();
