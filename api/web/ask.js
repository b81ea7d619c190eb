// The ask page: streams /ask (rt.openStream: fetch, so the API key can go
// in a header, which EventSource cannot send), renders the answer with its
// citations, and draws the waterfall as stage events arrive.
"use strict";

(() => {
  const $ = id => document.getElementById(id);
  const wf = new rt.Waterfall($("waterfall"));
  let es = null;

  function renderAnswer(el, s) {
    // Citations [n] link to source n.
    el.innerHTML = rt.esc(s).replace(/\[(\d+)\]/g, '<a class="cite" href="#src-$1">[$1]</a>');
  }

  function tile(label, value) { return `<div class="tile"><b>${value}</b><span>${rt.esc(label)}</span></div>`; }

  function ask(question, topK) {
    if (es) es.close();
    const answer = $("answer"), err = $("error");
    let text = "";
    answer.className = "answer streaming";
    answer.textContent = "";
    err.hidden = true;
    $("sources").innerHTML = "";
    $("summary").innerHTML = "";
    $("answer-meta").textContent = "";
    $("ask-button").disabled = true;
    wf.reset();

    // The client's estimate of the server's t0: stage ends are on the
    // server's clock, arrivals on ours; the smallest gap is the offset.
    const sent = performance.now();
    let offset = null, firstToken = false, ticker = null;
    const serverNow = () => performance.now() - sent - (offset ?? 0);

    const url = "/ask?" + new URLSearchParams({ q: question, top_k: String(topK) });
    es = rt.openStream(url);
    const finish = () => {
      es.close();
      es = null;
      clearInterval(ticker);
      answer.classList.remove("streaming");
      $("ask-button").disabled = false;
    };
    es.addEventListener("meta", e => {
      const m = JSON.parse(e.data);
      $("answer-meta").textContent = `${m.model} via ${m.provider} · top_k ${m.top_k} · query ${m.query_id}`;
    });
    es.addEventListener("stage", e => {
      const s = JSON.parse(e.data);
      const gap = performance.now() - sent - (s.start_ms + s.duration_ms);
      offset = offset === null ? gap : Math.min(offset, gap);
      wf.add(s);
    });
    es.addEventListener("sources", e => {
      const src = JSON.parse(e.data).sources;
      $("sources").innerHTML = src.map(s => `<li id="src-${s.rank}"><span class="rank">[${s.rank}]</span>
        <b>${rt.esc(s.title || s.doc_id)}</b> <span class="meta">${rt.esc(s.doc_id)} · score ${s.score.toFixed(3)}${s.rerank_score != null ? " · rerank " + s.rerank_score.toFixed(2) : ""}</span>
        <div class="text">${rt.esc(s.text.length > 280 ? s.text.slice(0, 280) + "…" : s.text)}</div></li>`).join("");
      // The model is working: show it until its stages arrive.
      const from = wf.spans.reduce((a, s) => Math.max(a, s.start_ms + s.duration_ms), 0);
      ticker = setInterval(() => { if (wf.pending || !firstToken) wf.setPending(from, Math.max(serverNow(), from)); }, 100);
    });
    es.addEventListener("token", e => {
      text += JSON.parse(e.data).text;
      renderAnswer(answer, text);
      if (!firstToken) {
        firstToken = true;
        wf.markTTFT(serverNow(), true);
      }
    });
    es.addEventListener("reasoning", () => {});
    es.addEventListener("done", e => {
      const d = JSON.parse(e.data);
      finish();
      wf.finish(d);
      const u = d.usage || {};
      $("summary").innerHTML = tile("TTFT", rt.fmtMs(d.ttft_ms)) + tile("end to end", rt.fmtMs(d.e2e_ms)) +
        tile("retrieval", rt.fmtMs(d.retrieval_ms)) + tile("retrieval share", rt.pct(d.retrieval_share)) +
        tile("prefill share", rt.pct(d.prefill_share)) + tile("overhead", rt.fmtMs(d.overhead_ms)) +
        tile("prompt / cached tokens", `${u.prompt_tokens ?? 0} / ${u.cached_tokens ?? "unknown"}`) +
        (d.prefill_unexplained_ms != null ? tile("before the server's prefill", rt.fmtMs(d.prefill_unexplained_ms)) : "") +
        `<div class="tile"><b><a href="/queries/${encodeURIComponent(d.query_id)}">details →</a></b><span>stored query</span></div>`;
      document.body.dataset.done = "1";
    });
    es.addEventListener("error", e => {
      if (!es) return; // already finished
      if (e.data) {
        const x = JSON.parse(e.data);
        err.textContent = `${x.code}: ${x.message}${x.hint ? " — " + x.hint : ""}`;
      } else {
        err.textContent = text ? "the connection was lost mid-answer"
          : "the request failed: check the question and top_k, and that the server is up";
      }
      err.hidden = false;
      finish();
      document.body.dataset.done = "error";
    });
  }

  $("ask-form").addEventListener("submit", e => {
    e.preventDefault();
    const q = $("question").value.trim();
    const k = parseInt($("top-k").value, 10);
    if (!q) return;
    if (!(k >= 1 && k <= 100)) {
      $("error").textContent = "top_k must be a whole number from 1 to 100";
      $("error").hidden = false;
      return;
    }
    delete document.body.dataset.done;
    ask(q, k);
  });
  $("question").addEventListener("keydown", e => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask-form").requestSubmit(); }
  });
  const preset = new URLSearchParams(location.search);
  if (preset.get("q")) {
    $("question").value = preset.get("q");
    if (preset.get("top_k")) $("top-k").value = preset.get("top_k");
  }
})();
