// The queries page: recent queries from GET /v1/queries with a small
// stacked bar each; filters and "older" paging with the API's cursor.
"use strict";

(() => {
  const $ = id => document.getElementById(id);
  const form = $("filters");
  let next = null;
  const params = new URLSearchParams(location.search);
  for (const el of form.elements) if (el.name && params.get(el.name)) el.value = params.get(el.name);
  rt.fillModels($("model"), [], params.get("provider"), params.get("model"));

  function query() {
    const p = new URLSearchParams();
    for (const el of form.elements) if (el.name && el.value) p.set(el.name, el.value);
    const m = rt.chosenModel($("model"));
    if (m.provider) p.set("provider", m.provider);
    if (m.model) p.set("model", m.model);
    return p;
  }

  // The selector's choices: the providers and models of the window (7 days
  // when the filter has none).
  async function loadModels() {
    const m = rt.chosenModel($("model"));
    try {
      const r = await rt.getJSON("/v1/stats/models?since=" + encodeURIComponent(form.elements.since.value || "7d"));
      rt.fillModels($("model"), r.models, m.provider, m.model);
    } catch (e) { /* the list itself reports errors */ }
  }

  async function load(url, append) {
    $("error").hidden = true;
    try {
      const page = await rt.getJSON(url);
      render(page.queries, append);
      next = page.next || null;
      $("more").hidden = !next;
    } catch (e) {
      $("error").textContent = e.message;
      $("error").hidden = false;
    }
  }

  let shown = [];
  function render(list, append) {
    shown = append ? shown.concat(list) : list;
    const scale = Math.max(1, ...shown.map(q => q.ttft_ms ?? rt.ttftParts(q).reduce((a, p) => a + p.ms, 0)));
    const rows = $("rows");
    rows.innerHTML = "";
    if (!shown.length) {
      rows.innerHTML = `<tr><td colspan="8" class="empty">no queries yet: ask one on the <a href="/">Ask</a> page</td></tr>`;
      return;
    }
    for (const q of shown) {
      const tr = document.createElement("tr");
      tr.className = "link";
      tr.dataset.id = q.query_id;
      tr.innerHTML = `<td class="nowrap">${rt.dateTime(q.created_at)}</td><td class="q" title="${rt.esc(q.question)}">${rt.esc(q.question || "(hash only)")}</td>
        <td class="nowrap" title="${rt.esc(q.provider)}">${rt.esc(q.model)}</td><td class="num">${q.top_k}</td>
        <td class="nowrap status-${q.status}">${q.status}${q.error_code ? " · " + rt.esc(q.error_code) : ""}</td>
        <td class="num nowrap">${rt.fmtMs(q.ttft_ms)}</td><td class="bar"></td><td class="num nowrap">${rt.fmtMs(q.e2e_ms)}</td>`;
      tr.querySelector("td.bar").appendChild(rt.stackedBar(q, scale, 220));
      tr.addEventListener("click", () => { location.href = "/queries/" + encodeURIComponent(q.query_id); });
      rows.appendChild(tr);
    }
  }

  const legend = $("legend");
  legend.className = "legend";
  legend.innerHTML = [...rt.stageOrder.filter(s => s !== "llm_decode"), "overhead"]
    .map(s => `<span><i style="background:${rt.colors[s]}"></i>${s}</span>`).join("");

  form.addEventListener("submit", e => {
    e.preventDefault();
    const p = query();
    history.replaceState(null, "", "/queries" + (p.toString() ? "?" + p : ""));
    load("/v1/queries?" + p, false);
  });
  form.elements.since.addEventListener("change", loadModels);
  loadModels();
  $("more").addEventListener("click", () => { if (next) load(next, true); });
  load("/v1/queries?" + query(), false);
})();
