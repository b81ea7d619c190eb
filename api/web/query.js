// One stored query: its full waterfall and every stage's attributes.
"use strict";

(async () => {
  const $ = id => document.getElementById(id);
  const id = decodeURIComponent(location.pathname.split("/").pop());
  let q;
  try {
    q = await rt.getJSON("/v1/queries/" + encodeURIComponent(id));
  } catch (e) {
    if (e.status === 404) {
      // Not an empty set of cards: say so, and draw nothing else.
      document.title = "ragtime · no such query";
      $("title").textContent = "No such query";
      $("error").textContent = `No query with id "${id}": it was never recorded here, was pruned, or was asked with another API key.`;
      for (const el of document.querySelectorAll(".card.query-detail")) el.hidden = true;
      $("question").innerHTML = `<a href="/queries">See the recent queries →</a>`;
    } else {
      $("error").textContent = e.message;
    }
    $("error").hidden = false;
    document.body.dataset.done = "1";
    return;
  }
  document.title = "ragtime · query " + q.query_id;
  $("title").innerHTML = `Query <small>${rt.esc(q.query_id)} · ${rt.dateTime(q.created_at)} · ${rt.esc(q.model)} via ${rt.esc(q.provider)} ·
    <span class="status-${q.status}">${q.status}</span></small>`;
  $("question").textContent = q.question || "(the question was stored as a hash only)";
  if (q.status !== "ok") {
    $("error").textContent = `${q.error_code || q.status}: ${q.error_message || ""}`;
    $("error").hidden = false;
  }
  if (q.trace_id) {
    // The link is built by the server from --trace-url-template; only
    // http(s) URLs are shown as links.
    const url = /^https?:\/\//.test(q.trace_url || "") ? q.trace_url : "";
    $("trace").innerHTML = "Trace " + (url
      ? `<a id="trace-link" href="${rt.esc(url)}" target="_blank" rel="noopener">${rt.esc(q.trace_id)}</a>`
      : `<code>${rt.esc(q.trace_id)}</code>`);
    $("trace").hidden = false;
  }
  const tile = (label, v) => `<div class="tile"><b>${v}</b><span>${rt.esc(label)}</span></div>`;
  const u = q.usage || {};
  $("summary").innerHTML = tile("TTFT", rt.fmtMs(q.ttft_ms)) + tile("first token (any)", rt.fmtMs(q.first_token_ms)) +
    tile("end to end", rt.fmtMs(q.e2e_ms)) + tile("retrieval", rt.fmtMs(q.retrieval_ms)) +
    tile("retrieval share", rt.pct(q.retrieval_share)) + tile("LLM connect + prefill", rt.fmtMs(q.gen_ttft_ms)) +
    tile("prefill share", rt.pct(q.prefill_share)) + tile("overhead", rt.fmtMs(q.overhead_ms)) +
    tile("top_k / rerank_top_n", `${q.top_k} / ${q.rerank_top_n}`) +
    tile("prompt / cached / completion tokens", `${u.prompt_tokens} / ${u.cached_tokens ?? "unknown"} / ${u.completion_tokens}`) +
    (q.prefill_unexplained_ms != null ? tile("before the server's prefill: queue, tokenize, network", rt.fmtMs(q.prefill_unexplained_ms)) : "") +
    tile("connection", q.conn_reused === undefined ? "–" : q.conn_reused ? "reused" : "new");

  const wf = new rt.Waterfall($("waterfall"));
  for (const s of q.stages || []) wf.spans.push(s);
  wf.finish(q);
  addEventListener("resize", () => wf.render());

  $("stages").innerHTML = (q.stages || []).map(s => `<tr><td>${s.seq}</td>
    <td><i style="display:inline-block;width:10px;height:10px;border-radius:2px;background:${rt.colors[s.name] || "#888"}"></i> ${rt.esc(s.name)}</td>
    <td class="num">${rt.fmtMs(s.start_ms)}</td><td class="num">${rt.fmtMs(s.duration_ms)}</td>
    <td><pre class="attrs">${s.attrs ? rt.esc(Object.entries(s.attrs).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join("\n")) : ""}</pre></td></tr>`).join("");
  document.body.dataset.done = "1";
})();
