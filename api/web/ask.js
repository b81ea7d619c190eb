// The ask page: asks through ragtime's browser client (/client.js: GET /ask
// over EventSource, or POST over fetch when the page holds a secret key,
// which only a header may carry), renders the answer with its citations,
// and draws the waterfall as stage events arrive. A module: it imports the
// client; rt comes from common.js, loaded before it.
import { ask as askRagtime } from "/client.js";

(() => {
  const $ = id => document.getElementById(id);
  const wf = new rt.Waterfall($("waterfall"));

  function renderAnswer(el, s) {
    // Citations [n] link to source n.
    el.innerHTML = rt.esc(s).replace(/\[(\d+)\]/g, '<a class="cite" href="#src-$1">[$1]</a>');
  }

  function tile(label, value) { return `<div class="tile"><b>${value}</b><span>${rt.esc(label)}</span></div>`; }

  let running = null; // the AbortController of the ask in flight

  function ask(question, topK, rerankTopN) {
    if (running) running.abort();
    const ctl = running = new AbortController();
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
    const finish = () => {
      if (running === ctl) running = null;
      clearInterval(ticker);
      answer.classList.remove("streaming");
      $("ask-button").disabled = false;
    };

    askRagtime(question, {
      topK, rerankTopN, key: rt.apiKey() || undefined, base: location.origin, signal: ctl.signal,
      onMeta: m => {
        $("answer-meta").textContent = `${m.model} via ${m.provider} · top_k ${m.top_k} · query ${m.query_id}`;
      },
      // The connection dropped: the client resumes the stream where it
      // stopped (the query keeps running on the server meanwhile).
      onReconnect: r => { $("answer-meta").textContent += ` · connection lost, resuming (${r.attempt})`; },
      onStage: s => {
        const gap = performance.now() - sent - (s.start_ms + s.duration_ms);
        offset = offset === null ? gap : Math.min(offset, gap);
        wf.add(s);
      },
      onSources: src => {
        $("sources").innerHTML = src.map(s => `<li id="src-${s.rank}"><span class="rank">[${s.rank}]</span>
          <b>${rt.esc(s.title || s.doc_id)}</b> <span class="meta">${rt.esc(s.doc_id)} · score ${s.score.toFixed(3)}${s.rerank_score != null ? " · rerank " + s.rerank_score.toFixed(2) : ""}</span>
          <div class="text">${rt.esc(s.text.length > 280 ? s.text.slice(0, 280) + "…" : s.text)}</div></li>`).join("");
        // The model is working: show it until its stages arrive.
        const from = wf.spans.reduce((a, s) => Math.max(a, s.start_ms + s.duration_ms), 0);
        ticker = setInterval(() => { if (wf.pending || !firstToken) wf.setPending(from, Math.max(serverNow(), from)); }, 100);
      },
      onToken: t => {
        text += t;
        renderAnswer(answer, text);
        if (!firstToken) {
          firstToken = true;
          wf.markTTFT(serverNow(), true);
        }
      },
    }).then(d => {
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
    }, x => {
      if (ctl.signal.aborted) return; // a newer ask replaced this one
      finish();
      if (x.status === 401) rt.askForKey(x);
      err.textContent = x.code === "stream_lost" && text ? "the connection was lost mid-answer"
        : `${x.code || "error"}: ${x.message}${x.hint ? " — " + x.hint : ""}`;
      err.hidden = false;
      document.body.dataset.done = "error";
    });
  }

  $("ask-form").addEventListener("submit", e => {
    e.preventDefault();
    const q = $("question").value.trim();
    // Empty: the server's default (serve --top-k, --rerank-top-n).
    const k = $("top-k").value === "" ? undefined : Number($("top-k").value);
    const n = $("rerank-top-n").value === "" ? undefined : Number($("rerank-top-n").value);
    if (!q) return;
    const maxK = Number($("top-k").max); // the server's limit, filled in by it
    const bad = k !== undefined && !(Number.isInteger(k) && k >= 1 && k <= maxK) ? `top_k must be a whole number from 1 to ${maxK}`
      : n !== undefined && !(Number.isInteger(n) && n >= 0 && n <= (k ?? maxK)) ? `rerank_top_n must be a whole number from 0 to ${k ?? maxK} (top_k)` : "";
    if (bad) {
      $("error").textContent = bad;
      $("error").hidden = false;
      return;
    }
    delete document.body.dataset.done;
    ask(q, k, n);
  });
  $("question").addEventListener("keydown", e => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("ask-form").requestSubmit(); }
  });
  const preset = new URLSearchParams(location.search);
  if (preset.get("q")) {
    $("question").value = preset.get("q");
    if (preset.get("top_k")) $("top-k").value = preset.get("top_k");
    if (preset.get("rerank_top_n")) $("rerank-top-n").value = preset.get("rerank_top_n");
  }
})();
