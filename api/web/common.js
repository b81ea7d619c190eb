// ragtime's shared page code: formatting, the JSON API, the waterfall and
// the small SVG charts. Hand-written on purpose: no build step, no CDN.
"use strict";

const rt = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const stageOrder = ["accept", "queue", "embed", "search", "rerank", "assemble", "llm_connect", "llm_prefill", "llm_decode"];
  const colors = {
    accept: "#c7ccd6", queue: "#9aa3b2", embed: "#4e79a7", search: "#59a14f", rerank: "#76b7b2", assemble: "#c9a227",
    llm_connect: "#b07aa1", llm_prefill: "#e15759", llm_decode: "#f28e2b", overhead: "#8c8c8c",
    retrieval: "#4e79a7",
  };
  const retrievalStages = ["embed", "search", "rerank", "assemble"];

  function fmtMs(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
    if (ms >= 1000) return (ms / 1000).toFixed(ms >= 10000 ? 1 : 2) + " s";
    if (ms >= 100) return ms.toFixed(0) + " ms";
    if (ms >= 10) return ms.toFixed(1) + " ms";
    if (ms >= 1) return ms.toFixed(2) + " ms";
    return ms.toFixed(3) + " ms";
  }
  function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(x < 0.1 ? 1 : 0) + "%"; }

  // tailRatio is a ttft_tail row's p99/p50 cell: 5× or more is the bimodal
  // signature of head-of-line blocking and shown red, unless the p50 or the
  // p99 is under a millisecond, where a ratio is noise (an extractive answer
  // of 0.02 ms with one of 4 ms reads 200×).
  const tailFlagRatio = 5, tailRatioFloorMs = 1;
  function tailRatio(r) {
    if (r.p99_over_p50 === null || r.p99_over_p50 === undefined) return "–";
    const subMs = !(r.ttft_p50_ms >= tailRatioFloorMs && r.ttft_p99_ms >= tailRatioFloorMs);
    const flag = r.p99_over_p50 >= tailFlagRatio && !subMs;
    const title = subMs ? ` title="under ${tailRatioFloorMs} ms: the ratio is noise"` : "";
    return `<b${flag ? " class=status-error" : ""}${title}>${r.p99_over_p50.toFixed(1)}×</b>`;
  }
  function esc(s) {
    return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  function time(t) { return new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }); }
  function dateTime(t) { return new Date(t).toLocaleString([], { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" }); }

  // svg makes an SVG element with attributes, appended to parent if given.
  function svg(tag, attrs, parent) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    const t = svg("text", Object.assign({ x, y }, attrs || {}), parent);
    t.textContent = s;
    return t;
  }

  // The API key, when the server requires one: asked for on the first 401,
  // kept in sessionStorage (so it goes when the tab closes, and other sites
  // cannot read it) and sent as "Authorization: Bearer".
  const keyItem = "ragtime.key";
  function apiKey() {
    try { return sessionStorage.getItem(keyItem) || ""; } catch (e) { return ""; }
  }
  function withKey(headers) {
    const k = apiKey();
    if (k) headers.Authorization = "Bearer " + k;
    return headers;
  }
  // askForKey shows a form for the key at the top of the page, with why the
  // server refused (auth_missing, auth_invalid, auth_revoked, ...).
  function askForKey(err) {
    if (document.getElementById("key-form")) return;
    const f = document.createElement("form");
    f.id = "key-form";
    f.className = "card keybar";
    f.innerHTML = `<label>This server requires an API key
      <input id="key-input" type="password" autocomplete="off" spellcheck="false" placeholder="rt_sk_…" required></label>
      <button type="submit">Use key</button> <span class="muted" id="key-why"></span>`;
    f.querySelector("#key-why").textContent = err ? `${err.code}: ${err.message}` : "";
    f.addEventListener("submit", e => {
      e.preventDefault();
      try { sessionStorage.setItem(keyItem, f.querySelector("#key-input").value.trim()); } catch (x) { /* storage off */ }
      location.reload();
    });
    document.querySelector("main").prepend(f);
  }
  // A "forget key" link in the header while a key is kept.
  document.addEventListener("DOMContentLoaded", () => {
    if (!apiKey()) return;
    const a = document.createElement("a");
    a.href = "#";
    a.id = "forget-key";
    a.textContent = "forget key";
    a.addEventListener("click", e => { e.preventDefault(); sessionStorage.removeItem(keyItem); location.reload(); });
    document.querySelector("header nav")?.appendChild(a);
  });

  // getJSON fetches an API URL; a non-2xx answer throws the API's message
  // (and a 401 asks for a key).
  async function getJSON(url) {
    const resp = await fetch(url, { headers: withKey({ Accept: "application/json" }) });
    const body = await resp.json().catch(() => null);
    if (resp.status === 401) askForKey(body && body.error);
    if (!resp.ok) {
      const err = new Error((body && body.error && body.error.message) || resp.status + " " + resp.statusText);
      err.status = resp.status;
      throw err;
    }
    return body;
  }

  // niceStep returns a 1-2-5 step giving about n ticks up to max.
  function niceStep(max, n) {
    const raw = max / Math.max(n, 1);
    const mag = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 5, 10]) if (raw <= m * mag) return m * mag;
    return 10 * mag;
  }

  function legend(container, items) {
    const d = document.createElement("div");
    d.className = "legend";
    d.innerHTML = items.map(i => `<span><i style="background:${i.color}"></i>${esc(i.label)}</span>`).join("");
    container.appendChild(d);
  }

  // modelKey is the value of a model selector's option for a provider and
  // model; "" is every model.
  function modelKey(provider, model) { return provider || model ? JSON.stringify([provider || "", model || ""]) : ""; }

  // fillModels fills a <select> with "all models" (allLabel) and the
  // window's providers and models (/v1/stats' models), and selects
  // [provider, model]: kept as a choice even when the window has none of it.
  function fillModels(sel, models, provider, model, allLabel) {
    const want = modelKey(provider, model);
    sel.innerHTML = "";
    sel.add(new Option(allLabel || "all models", ""));
    const list = models.slice();
    if (want && !list.some(m => modelKey(m.provider, m.model) === want)) list.push({ provider, model, queries: 0 });
    for (const m of list) {
      const label = `${m.model || "any model"} · ${m.provider || "any provider"}` + (m.queries ? ` (${m.queries})` : "");
      sel.add(new Option(label, modelKey(m.provider, m.model)));
    }
    sel.value = want;
  }

  // chosenModel reads a model selector: {provider, model}, empty for all.
  function chosenModel(sel) {
    if (!sel.value) return { provider: "", model: "" };
    const [provider, model] = JSON.parse(sel.value);
    return { provider, model };
  }

  // Waterfall draws one query's stages as bars on a time axis (milliseconds
  // since t0), the TTFT as a dashed line, and the retrieval and prefill
  // shares. Stages can be added one at a time as they arrive.
  class Waterfall {
    constructor(container) {
      this.el = container;
      this.reset(false);
    }
    // reset clears the waterfall; waiting (the default) says a query is on
    // its way, else it says where the stages will appear.
    reset(waiting = true) {
      this.waiting = waiting;
      this.spans = [];
      this.ttft = null;
      this.ttftApprox = false;
      this.pending = null; // {from, to}: the model is working, its stages not yet reported
      this.shares = null;
      // unexplained is the part of llm_prefill before the server's own
      // prefill (prefill_unexplained_ms), when the server reported it.
      this.unexplained = null;
      this.render();
    }
    add(span) {
      this.spans.push(span);
      if (span.name.startsWith("llm_")) this.pending = null;
      this.render();
    }
    markTTFT(ms, approx) { this.ttft = ms; this.ttftApprox = !!approx; this.render(); }
    setPending(from, to) { this.pending = { from, to }; this.render(); }
    finish(done) {
      this.pending = null;
      if (done.ttft_ms !== null && done.ttft_ms !== undefined) { this.ttft = done.ttft_ms; this.ttftApprox = false; }
      this.shares = { retrieval: done.retrieval_share, prefill: done.prefill_share };
      this.unexplained = done.prefill_unexplained_ms ?? null;
      this.render();
    }
    render() {
      const el = this.el;
      el.innerHTML = "";
      const W = Math.max(el.clientWidth || 0, 480), left = 96, right = 150, top = 30, rowH = 24, barH = 15;
      const pi = this.spans.findIndex(s => s.name === "llm_prefill");
      const prefill = this.spans[pi];
      const split = !!prefill && this.unexplained !== null;
      // the split's row goes right under llm_prefill's; later rows move down
      const rowOf = i => i + (split && i > pi ? 1 : 0);
      const rows = this.spans.length + (this.pending ? 1 : 0) + (split ? 1 : 0);
      const H = top + Math.max(rows, 1) * rowH + 30;
      const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "waterfall", role: "img", "aria-label": "stage waterfall" }, el);
      const defs = svg("defs", {}, root);
      const pat = svg("pattern", { id: "pending-stripes", width: 8, height: 8, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, defs);
      svg("rect", { width: 8, height: 8, fill: "#f6c7c8" }, pat);
      svg("rect", { width: 4, height: 8, fill: "#e15759" }, pat);

      let max = 1;
      for (const s of this.spans) max = Math.max(max, s.start_ms + s.duration_ms);
      if (this.ttft) max = Math.max(max, this.ttft);
      if (this.pending) max = Math.max(max, this.pending.to);
      max *= 1.04;
      const plotW = W - left - right;
      const x = ms => left + (ms / max) * plotW;

      // Axis and grid.
      const step = niceStep(max, 6);
      const axisY = top + Math.max(rows, 1) * rowH + 4;
      const axis = svg("g", { class: "axis" }, root);
      svg("line", { x1: left, x2: left + plotW, y1: axisY, y2: axisY }, axis);
      for (let v = 0; rows && v <= max; v += step) { // no time axis before the first stage
        svg("line", { x1: x(v), x2: x(v), y1: top - 6, y2: axisY, class: "grid" }, root);
        text(axis, x(v), axisY + 14, v === 0 ? "0" : fmtMs(v), { "text-anchor": "middle" });
      }
      if (!rows) text(root, left, top + 14, this.waiting ? "waiting for the first stage…" : "ask a question: its stages appear here as they happen", { class: "muted idle", fill: "#6b7280" });

      // Shares.
      const sh = this.currentShares();
      const parts = [];
      if (this.ttft) parts.push(`TTFT ${this.ttftApprox ? "≈ " : ""}${fmtMs(this.ttft)}`);
      if (sh.retrieval !== null) parts.push(`retrieval ${pct(sh.retrieval)} of TTFT`);
      if (sh.prefill !== null) parts.push(`prefill ${pct(sh.prefill)} of TTFT`);
      text(root, left, 14, parts.join("  ·  "), { class: "shares", "font-weight": 600 });

      // Bars, in the order the stages arrived.
      this.spans.forEach((s, i) => {
        const y = top + rowOf(i) * rowH;
        text(root, left - 8, y + barH - 3, s.name, { "text-anchor": "end" });
        const w = Math.max((s.duration_ms / max) * plotW, 1.5);
        const r = svg("rect", { x: x(s.start_ms), y, width: w, height: barH, rx: 2, fill: colors[s.name] || "#888", class: "bar", "data-stage": s.name }, root);
        const t = svg("title", {}, r);
        t.textContent = `${s.name}: ${fmtMs(s.duration_ms)} from ${fmtMs(s.start_ms)}`;
        let label = fmtMs(s.duration_ms);
        if (s.name === "llm_prefill" && sh.prefill !== null) label += ` (${pct(sh.prefill)} of TTFT)`;
        text(root, x(s.start_ms) + w + 5, y + barH - 3, label);
      });
      if (split) {
        // The part of llm_prefill before the server's own prefill, under it.
        const y = top + (pi + 1) * rowH, u = this.unexplained;
        const what = "before the server's prefill: queue, tokenize, network";
        text(root, left - 8, y + barH - 3, "↳ pre-prefill", { "text-anchor": "end" });
        const w = Math.max((Math.max(u, 0) / max) * plotW, 1.5);
        const r = svg("rect", { x: x(prefill.start_ms), y, width: w, height: barH, rx: 2, fill: "#f6c7c8", stroke: colors.llm_prefill, class: "part", "data-part": "prefill_unexplained" }, root);
        svg("title", {}, r).textContent = `${what}: ${fmtMs(u)} of llm_prefill's ${fmtMs(prefill.duration_ms)} (the rest is the server's own prefill)`;
        text(root, x(prefill.start_ms) + w + 5, y + barH - 3, `${fmtMs(u)} ${what}`, { class: "part-label" });
      }
      if (this.pending) {
        const y = top + (this.spans.length + (split ? 1 : 0)) * rowH;
        text(root, left - 8, y + barH - 3, "llm …", { "text-anchor": "end" });
        svg("rect", { x: x(this.pending.from), y, width: Math.max(x(this.pending.to) - x(this.pending.from), 1.5), height: barH, rx: 2, class: "pending" }, root);
        text(root, x(this.pending.to) + 5, y + barH - 3, "generating", { fill: "#6b7280" });
      }

      // Retrieval bracket under its stages.
      const rs = this.spans.filter(s => retrievalStages.includes(s.name));
      if (rs.length && sh.retrieval !== null) {
        const a = Math.min(...rs.map(s => s.start_ms)), b = Math.max(...rs.map(s => s.start_ms + s.duration_ms));
        const y = top - 8;
        svg("path", { d: `M${x(a)},${y + 4}V${y}H${x(b)}V${y + 4}`, stroke: colors.retrieval, fill: "none" }, root);
      }

      // TTFT marker.
      if (this.ttft) {
        svg("line", { x1: x(this.ttft), x2: x(this.ttft), y1: top - 4, y2: axisY, class: "ttft-line" }, root);
        text(root, x(this.ttft) + 4, axisY - 4, (this.ttftApprox ? "first token ≈ " : "TTFT ") + fmtMs(this.ttft), { class: "ttft-label" });
      }
    }
    // currentShares are the done event's, or estimated from what arrived.
    currentShares() {
      if (this.shares) return { retrieval: this.shares.retrieval ?? null, prefill: this.shares.prefill ?? null };
      const out = { retrieval: null, prefill: null };
      if (!this.ttft) return out;
      const sum = names => this.spans.filter(s => names.includes(s.name)).reduce((a, s) => a + s.duration_ms, 0);
      if (this.spans.some(s => retrievalStages.includes(s.name))) out.retrieval = sum(retrievalStages) / this.ttft;
      if (this.spans.some(s => s.name === "llm_prefill")) out.prefill = sum(["llm_prefill"]) / this.ttft;
      return out;
    }
  }

  // ttftParts splits a listed query's TTFT into its parts, in pipeline order.
  function ttftParts(q) {
    const parts = [];
    for (const name of stageOrder) {
      if (name === "llm_decode") continue;
      const v = q.stages && q.stages[name];
      if (v > 0) parts.push({ name, ms: v });
    }
    if (q.overhead_ms > 0) parts.push({ name: "overhead", ms: q.overhead_ms });
    return parts;
  }

  // stackedBar draws a query's TTFT parts as one small bar. Its length is
  // TTFT on a log scale up to scaleMax milliseconds (so a 3 ms answer is
  // still seen next to a 3 s one), at least 12 % of width; the parts split
  // that length in their proportions.
  function stackedBar(q, scaleMax, width) {
    const h = 12;
    const root = svg("svg", { width, height: h, class: "stacked" });
    svg("rect", { width, height: h, fill: "#f1f3f6", rx: 2 }, root);
    const parts = ttftParts(q);
    const total = parts.reduce((a, p) => a + p.ms, 0);
    if (total <= 0) return root;
    const length = width * Math.max(0.12, Math.min(1, Math.log10(1 + total) / Math.log10(1 + Math.max(scaleMax, total))));
    root.dataset.length = length.toFixed(1);
    let at = 0;
    for (const p of parts) {
      const w = (p.ms / total) * length;
      const r = svg("rect", { x: at, width: Math.max(w, 0.5), height: h, fill: colors[p.name], "data-stage": p.name }, root);
      svg("title", {}, r).textContent = `${p.name}: ${fmtMs(p.ms)}`;
      at += w;
    }
    return root;
  }

  // chartFrame draws axes for a chart and returns its scales.
  function chartFrame(container, opts) {
    const W = Math.max(container.clientWidth || 0, 360), H = opts.height || 220, m = { l: 58, r: 14, t: 10, b: 28 };
    const root = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "chart" }, container);
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const yMax = opts.yMax || 1;
    const y = v => m.t + ph - (v / yMax) * ph;
    const step = niceStep(yMax, 4);
    for (let v = 0; v <= yMax + 1e-9; v += step) {
      svg("line", { x1: m.l, x2: m.l + pw, y1: y(v), y2: y(v), class: "grid" }, root);
      text(root, m.l - 6, y(v) + 4, v === 0 ? "0" : opts.yFmt(v), { "text-anchor": "end" });
    }
    svg("line", { x1: m.l, x2: m.l + pw, y1: m.t + ph, y2: m.t + ph, stroke: "#c9ced6" }, root);
    return { root, W, H, m, pw, ph, y };
  }

  // axisLabel writes an x-axis label centred on x, moved left as far as it
  // takes to keep it inside the chart (the last one used to be clipped).
  function axisLabel(f, x, s) {
    const half = s.length * 3.4; // ~11px system-ui digits
    text(f.root, Math.max(Math.min(x, f.W - 2 - half), half + 2), f.H - 8, s, { "text-anchor": "middle" });
  }

  function emptyChart(container, msg) {
    container.innerHTML = `<div class="empty">${esc(msg || "no queries in this window")}</div>`;
  }

  // lineChart draws series over time; points have .time and the series keys.
  function lineChart(container, points, series, opts) {
    container.innerHTML = "";
    if (!points.length) return emptyChart(container);
    let yMax = opts.yMax;
    if (!yMax) {
      yMax = 0;
      for (const p of points) for (const s of series) yMax = Math.max(yMax, p[s.key] || 0);
      yMax = yMax > 0 ? yMax * 1.1 : 1;
      const st = niceStep(yMax, 4);
      yMax = Math.ceil(yMax / st) * st;
    }
    const f = chartFrame(container, { yMax, yFmt: opts.yFmt });
    const t0 = new Date(points[0].time).getTime(), t1 = new Date(points[points.length - 1].time).getTime();
    const x = t => f.m.l + (t1 === t0 ? f.pw / 2 : ((new Date(t).getTime() - t0) / (t1 - t0)) * f.pw);
    const nLabels = Math.min(points.length, 6);
    for (let i = 0; i < nLabels; i++) {
      const p = points[Math.round((i * (points.length - 1)) / Math.max(nLabels - 1, 1))];
      axisLabel(f, x(p.time), new Date(p.time).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
    }
    for (const s of series) {
      const pts = points.filter(p => p[s.key] !== null && p[s.key] !== undefined);
      if (!pts.length) continue;
      svg("polyline", { points: pts.map(p => `${x(p.time)},${f.y(p[s.key])}`).join(" "), fill: "none", stroke: s.color, "stroke-width": 2, class: "series", "data-series": s.key }, f.root);
      for (const p of pts) {
        const c = svg("circle", { cx: x(p.time), cy: f.y(p[s.key]), r: 2.5, fill: s.color }, f.root);
        svg("title", {}, c).textContent = `${s.label} ${opts.yFmt(p[s.key])} at ${time(p.time)}`;
      }
    }
    legend(container, series);
  }

  // stackedColumns draws, per point, columns stacked from the keys' values
  // (shares that add up to at most 1).
  function stackedColumns(container, points, keys) {
    container.innerHTML = "";
    if (!points.length) return emptyChart(container);
    const f = chartFrame(container, { yMax: 1, yFmt: v => (100 * v).toFixed(0) + "%" });
    const bw = f.pw / points.length;
    points.forEach((p, i) => {
      let acc = 0;
      for (const k of keys) {
        const v = p[k.key] || 0;
        if (v <= 0) continue;
        const r = svg("rect", { x: f.m.l + i * bw + bw * 0.1, y: f.y(acc + v), width: bw * 0.8, height: f.y(acc) - f.y(acc + v), fill: k.color, "data-series": k.key }, f.root);
        svg("title", {}, r).textContent = `${k.label} ${pct(v)} at ${time(p.time)}`;
        acc += v;
      }
    });
    const nLabels = Math.min(points.length, 6);
    for (let j = 0; j < nLabels; j++) {
      const i = Math.round((j * (points.length - 1)) / Math.max(nLabels - 1, 1));
      axisLabel(f, f.m.l + (i + 0.5) * bw, new Date(points[i].time).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
    }
    legend(container, keys);
  }

  // groupedBars draws, per category, one bar per series.
  function groupedBars(container, cats, series, opts) {
    container.innerHTML = "";
    if (!cats.length) return emptyChart(container);
    let yMax = 0;
    for (const s of series) for (const v of s.values) yMax = Math.max(yMax, v || 0);
    yMax = yMax > 0 ? yMax * 1.1 : 1;
    const st = niceStep(yMax, 4);
    yMax = Math.ceil(yMax / st) * st;
    const f = chartFrame(container, { yMax, yFmt: opts.yFmt });
    const gw = f.pw / cats.length, bw = (gw * 0.8) / series.length;
    cats.forEach((c, i) => {
      series.forEach((s, j) => {
        const v = s.values[i] || 0;
        const r = svg("rect", { x: f.m.l + i * gw + gw * 0.1 + j * bw, y: f.y(v), width: bw * 0.92, height: f.y(0) - f.y(v), fill: s.color, "data-series": s.key }, f.root);
        svg("title", {}, r).textContent = `${opts.catLabel}${c}: ${s.label} ${opts.yFmt(v)}`;
      });
      axisLabel(f, f.m.l + (i + 0.5) * gw, opts.catLabel + c);
    });
    legend(container, series);
  }

  return { stageOrder, colors, fmtMs, pct, tailRatio, esc, time, dateTime, svg, getJSON, apiKey, askForKey, Waterfall, ttftParts, stackedBar, lineChart, stackedColumns, groupedBars, fillModels, chosenModel, modelKey,
    chartFrame, axisLabel, niceStep, legend, emptyChart };
})();
