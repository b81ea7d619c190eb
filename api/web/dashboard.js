// The dashboard: GET /v1/stats?since=…&provider=…&model=… drawn as charts
// and tables. With several models in the window and none chosen, it shows
// the busiest one: one p50 over an extractive 3 ms answer and a 150 ms
// model's describes neither ("all models" pools them on purpose).
"use strict";

(() => {
  const $ = id => document.getElementById(id);
  const form = $("window");
  const params = new URLSearchParams(location.search);
  const preset = params.get("since");
  if (preset) {
    const sel = form.elements.since;
    if (![...sel.options].some(o => o.value === preset)) sel.add(new Option(preset));
    sel.value = preset;
  }
  // The choice: from the address, then from the selector; "all" pools.
  let choice = params.has("provider") || params.has("model") || params.get("all") === "1"
    ? { provider: params.get("provider") || "", model: params.get("model") || "", all: params.get("all") === "1" } : null;
  const hourOf = r => new Date(r.hour).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit" });
  const modelOf = r => `${rt.esc(r.model)} <span class="muted">${rt.esc(r.provider)}</span>`;

  function table(el, cols, rows, empty) {
    if (!rows.length) { el.innerHTML = `<div class="empty">${rt.esc(empty || "no queries in this window")}</div>`; return; }
    el.innerHTML = `<table><thead><tr>${cols.map(c => `<th class="${c.num ? "num" : ""}">${c.label}</th>`).join("")}</tr></thead><tbody>` +
      rows.map(r => `<tr${r.query_id ? ` class="link" data-id="${rt.esc(r.query_id)}"` : ""}>` +
        cols.map(c => `<td class="${c.num ? "num" : ""}${c.cls ? " " + c.cls : ""}">${c.fmt(r)}</td>`).join("") + "</tr>").join("") +
      "</tbody></table>";
    for (const tr of el.querySelectorAll("tr.link")) tr.addEventListener("click", () => { location.href = "/queries/" + encodeURIComponent(tr.dataset.id); });
  }

  // prefillChart draws llm_prefill_ms against uncached prompt tokens for
  // the prefill model's window (st.prefill_points) of one model (the one
  // with most points when several are pooled), with the fitted line
  // (prefill_model: intercept_ms + ms_per_token × tokens), the band of its
  // spread (× ratio_p50 to × ratio_p95) and, dashed, × ratio_p90 (the
  // budget's default quantile).
  function prefillChart(el, points, fits) {
    el.innerHTML = "";
    $("prefill-note").textContent = "";
    if (!points.length) return rt.emptyChart(el, "no model answered in the past hour: the prefill model is fitted from the last 256 ok queries of the past hour");
    const keys = [...new Set(points.map(p => rt.modelKey(p.provider, p.model)))];
    let key = keys[0];
    if (keys.length > 1) {
      const count = k => points.filter(p => rt.modelKey(p.provider, p.model) === k).length;
      key = keys.reduce((a, b) => (count(b) > count(a) ? b : a));
    }
    const pts = points.filter(p => rt.modelKey(p.provider, p.model) === key);
    if (keys.length > 1) $("prefill-note").textContent = ` · ${pts[0].model} (${pts[0].provider}) of ${keys.length} models; pick one above`;
    const fit = fits.find(f => f.provider === pts[0].provider && f.model === pts[0].model);
    let xMax = Math.max(...pts.map(p => p.uncached_tokens)) * 1.05 || 1;
    const xs = rt.niceStep(xMax, 5);
    xMax = Math.ceil(xMax / xs) * xs;
    const line = t => fit.intercept_ms + fit.ms_per_token * t;
    let yMax = Math.max(...pts.map(p => p.prefill_ms));
    if (fit) yMax = Math.max(yMax, line(0) * fit.ratio_p95, line(xMax) * fit.ratio_p95);
    yMax = yMax > 0 ? yMax * 1.1 : 1;
    const ys = rt.niceStep(yMax, 4);
    yMax = Math.ceil(yMax / ys) * ys;
    const f = rt.chartFrame(el, { yMax, yFmt: rt.fmtMs });
    const x = t => f.m.l + (t / xMax) * f.pw;
    for (let v = 0; v <= xMax + 1e-9; v += xs) rt.axisLabel(f, x(v), v === 0 ? "0 tokens" : String(v));
    const items = [{ label: `measured (${pts.length} queries)`, color: "#4e79a7" }];
    if (fit) {
      const band = [[0, fit.ratio_p50], [xMax, fit.ratio_p50], [xMax, fit.ratio_p95], [0, fit.ratio_p95]];
      const b = rt.svg("polygon", { points: band.map(([t, r]) => `${x(t)},${f.y(line(t) * r)}`).join(" "), fill: "#f28e2b", "fill-opacity": 0.18, "data-series": "spread" }, f.root);
      rt.svg("title", {}, b).textContent = `spread: measured ÷ fitted ${fit.ratio_p50.toFixed(2)} (p50) to ${fit.ratio_p95.toFixed(2)} (p95)`;
      const l = rt.svg("line", { x1: x(0), y1: f.y(line(0)), x2: x(xMax), y2: f.y(line(xMax)), stroke: "#e15759", "stroke-width": 2, "data-series": "fit" }, f.root);
      rt.svg("title", {}, l).textContent = `fit: ${rt.fmtMs(fit.intercept_ms)} + ${fit.ms_per_token.toFixed(4)} ms a token (${fit.samples} queries)`;
      rt.svg("line", { x1: x(0), y1: f.y(line(0) * fit.ratio_p90), x2: x(xMax), y2: f.y(line(xMax) * fit.ratio_p90), stroke: "#e15759", "stroke-width": 1.3, "stroke-dasharray": "6 4", "data-series": "fit-p90" }, f.root);
      items.push({ label: `fit ${rt.fmtMs(fit.intercept_ms)} + ${fit.ms_per_token.toFixed(4)} ms/token`, color: "#e15759" },
        { label: `× p90 ratio ${fit.ratio_p90.toFixed(2)}`, color: "#e15759" },
        { label: `spread p50–p95 (× ${fit.ratio_p50.toFixed(2)}–${fit.ratio_p95.toFixed(2)})`, color: "rgba(242,142,43,0.35)" });
    }
    for (const p of pts) {
      const c = rt.svg("circle", { cx: x(p.uncached_tokens), cy: f.y(p.prefill_ms), r: 2.5, fill: "#4e79a7", "fill-opacity": 0.7, class: "point", "data-series": "point" }, f.root);
      rt.svg("title", {}, c).textContent = `${p.uncached_tokens} uncached tokens: prefill ${rt.fmtMs(p.prefill_ms)} at ${rt.time(p.created_at)}`;
    }
    rt.legend(el, items);
  }

  async function get(since, c) {
    const p = new URLSearchParams({ since });
    if (c && c.provider) p.set("provider", c.provider);
    if (c && c.model) p.set("model", c.model);
    return rt.getJSON("/v1/stats?" + p);
  }

  async function load() {
    const since = form.elements.since.value;
    $("error").hidden = true;
    let st;
    try {
      st = await get(since, choice);
      if (!choice && st.models.length > 1) {
        // several models and no choice: the busiest, not a pooled p50
        const top = st.models.reduce((a, b) => (b.queries > a.queries ? b : a));
        choice = { provider: top.provider, model: top.model };
        st = await get(since, choice);
      }
    } catch (e) {
      $("error").textContent = e.message;
      $("error").hidden = false;
      return;
    }
    const c = choice || { provider: "", model: "" };
    rt.fillModels($("model"), st.models, c.provider, c.model, st.models.length > 1 ? "all models, pooled" : "all models");
    const addr = new URLSearchParams({ since });
    if (c.provider) addr.set("provider", c.provider);
    if (c.model) addr.set("model", c.model);
    if (c.all) addr.set("all", "1");
    history.replaceState(null, "", "/dashboard?" + addr);
    $("window-note").textContent = `${rt.dateTime(st.since)} → ${rt.dateTime(st.until)}, ${st.bucket} buckets` +
      (!c.provider && !c.model && st.models.length > 1 ? ` · ${st.models.length} models pooled: pick one to compare like with like` : "");
    const t = st.totals;
    const tile = (label, v) => `<div class="tile"><b>${v}</b><span>${rt.esc(label)}</span></div>`;
    $("totals").innerHTML = tile("queries", t.queries) + tile("ok / error / cancelled", `${t.ok} / ${t.errors} / ${t.cancelled}`) +
      tile("TTFT p50", rt.fmtMs(t.ttft_p50_ms)) + tile("TTFT p95", rt.fmtMs(t.ttft_p95_ms)) + tile("TTFT p99", rt.fmtMs(t.ttft_p99_ms)) +
      tile("p99 / p50", t.ttft_p50_ms ? (t.ttft_p99_ms / t.ttft_p50_ms).toFixed(1) + "×" : "–") +
      // null when no provider in the window reported cached tokens (Ollama
      // reuses its cache but says nothing): unknown, not 0 %
      tile("cache hit rate", t.cache_hit_rate == null ? (t.queries ? "unknown" : "–") : rt.pct(t.cache_hit_rate));

    rt.lineChart($("ttft-chart"), st.series, [
      { key: "ttft_p50_ms", label: "p50", color: "#4e79a7" },
      { key: "ttft_p95_ms", label: "p95", color: "#f28e2b" },
      { key: "ttft_p99_ms", label: "p99", color: "#e15759" },
    ], { yFmt: rt.fmtMs });
    rt.stackedColumns($("share-chart"), st.series, [
      { key: "queue_share", label: "queue", color: rt.colors.queue },
      { key: "retrieval_share", label: "retrieval", color: rt.colors.retrieval },
      { key: "llm_connect_share", label: "llm_connect", color: rt.colors.llm_connect },
      { key: "llm_prefill_share", label: "llm_prefill", color: rt.colors.llm_prefill },
      { key: "overhead_share", label: "overhead", color: rt.colors.overhead },
    ]);
    // One model's trade-off at a time: the busiest when several are pooled.
    let tk = st.topk_tradeoff.filter(r => r.ok > 0);
    const tkModels = [...new Set(tk.map(r => rt.modelKey(r.provider, r.model)))];
    $("topk-note").textContent = "";
    if (tkModels.length > 1) {
      const count = k => tk.filter(r => rt.modelKey(r.provider, r.model) === k).reduce((a, r) => a + r.ok, 0);
      const top = tkModels.reduce((a, b) => (count(b) > count(a) ? b : a));
      tk = tk.filter(r => rt.modelKey(r.provider, r.model) === top);
      $("topk-note").textContent = ` · ${tk[0].model} (${tk[0].provider}) of ${tkModels.length} models; pick one above`;
    }
    rt.groupedBars($("topk-chart"), tk.map(r => r.top_k), [
      { key: "ttft_p50_ms", label: "TTFT p50", color: "#4e79a7", values: tk.map(r => r.ttft_p50_ms) },
      { key: "ttft_p95_ms", label: "TTFT p95", color: "#e15759", values: tk.map(r => r.ttft_p95_ms) },
      { key: "retrieval_p50_ms", label: "retrieval p50", color: "#59a14f", values: tk.map(r => r.retrieval_p50_ms) },
      { key: "llm_prefill_p50_ms", label: "prefill p50", color: "#f28e2b", values: tk.map(r => r.llm_prefill_p50_ms) },
    ], { yFmt: rt.fmtMs, catLabel: "k=" });
    rt.lineChart($("cache-chart"), st.series, [{ key: "cache_hit_rate", label: "hit rate", color: "#59a14f" }],
      { yFmt: v => (100 * v).toFixed(0) + "%", yMax: 1 });

    prefillChart($("prefill-chart"), st.prefill_points || [], st.prefill_model || []);

    table($("stage-table"), [
      { label: "model", fmt: modelOf },
      { label: "stage", fmt: r => `<i style="display:inline-block;width:10px;height:10px;border-radius:2px;background:${rt.colors[r.stage] || "#888"}"></i> ${rt.esc(r.stage)}` },
      { label: "count", num: true, fmt: r => r.n },
      { label: "p50", num: true, fmt: r => rt.fmtMs(r.p50_ms) }, { label: "p90", num: true, fmt: r => rt.fmtMs(r.p90_ms) },
      { label: "p95", num: true, fmt: r => rt.fmtMs(r.p95_ms) }, { label: "p99", num: true, fmt: r => rt.fmtMs(r.p99_ms) },
      { label: "max", num: true, fmt: r => rt.fmtMs(r.max_ms) },
    ], st.stage_percentiles);
    table($("tail-table"), [
      { label: "hour", cls: "nowrap", fmt: hourOf }, { label: "model", fmt: modelOf },
      { label: "answered", num: true, fmt: r => r.answered }, { label: "p50", num: true, fmt: r => rt.fmtMs(r.ttft_p50_ms) },
      { label: "p99", num: true, fmt: r => rt.fmtMs(r.ttft_p99_ms) },
      { label: "p99/p50", num: true, fmt: rt.tailRatio },
    ], st.ttft_tail);
    table($("network-table"), [
      { label: "hour", cls: "nowrap", fmt: hourOf }, { label: "model", fmt: modelOf },
      { label: "calls", num: true, fmt: r => r.llm_calls }, { label: "reused", num: true, fmt: r => rt.pct(r.reused_share) },
      { label: "connect p95", num: true, fmt: r => rt.fmtMs(r.llm_connect_p95_ms) },
      { label: "new conn. p95", num: true, fmt: r => rt.fmtMs(r.new_conn_connect_p95_ms) },
      { label: "HTTP errors", num: true, fmt: r => r.upstream_errors },
    ], st.network_health, "no model reached over the network in this window (extractive answers in-process)");
    table($("slow-table"), [
      { label: "time", cls: "nowrap", fmt: r => rt.dateTime(r.created_at) }, { label: "question", cls: "q", fmt: r => rt.esc(r.question || "") },
      { label: "model", fmt: modelOf },
      { label: "top_k", num: true, fmt: r => r.top_k }, { label: "status", fmt: r => `<span class="status-${r.status}">${r.status}</span>` },
      { label: "TTFT", num: true, fmt: r => rt.fmtMs(r.ttft_ms) },
      { label: "dominant stage", fmt: r => r.dominant_stage ? `${rt.esc(r.dominant_stage)} (${rt.fmtMs(r.dominant_ms)})` : "–" },
      { label: "", fmt: r => `<a href="/queries/${encodeURIComponent(r.query_id)}">waterfall →</a>` },
    ], st.slow_queries);
    document.body.dataset.done = "1";
  }

  form.addEventListener("submit", e => { e.preventDefault(); load(); });
  form.elements.since.addEventListener("change", load);
  $("model").addEventListener("change", () => {
    const m = rt.chosenModel($("model"));
    choice = { provider: m.provider, model: m.model, all: !m.provider && !m.model };
    load();
  });
  load();
})();
