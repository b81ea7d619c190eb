// ragtime's browser client, served by ragtime at /client.js: one hand-written
// ES module, no build step, no dependencies. docs/api.md ("The browser client")
// describes it; in short:
//
//   import { ask } from "https://rag.example.com/client.js";
//   const done = await ask("What is prefill?", {
//     topK: 4, key: "rt_pk_…", signal: controller.signal,
//     onToken: text => answer.append(text),
//     onStage: span => waterfall.add(span),
//     onSources: sources => list(sources),
//   });
//   console.log(done.ttft_ms, done.query_id);
//
// GET /ask through EventSource when it can (no key, or a publishable key,
// which travels as ?key=); POST /ask through fetch and a stream reader when
// it must (a secret key, which only a header may carry, or metadata
// filters, which GET cannot say). Both close on done or error and honour
// the stream's reconnect rules: a dropped connection is resumed from the
// last event id (Last-Event-ID) after the server's retry: delay, so the
// model is never asked twice; a 204 says the query ended meanwhile.

/** The ragtime server this module was loaded from. */
const defaultBase = new URL(import.meta.url).origin;

/** How many times one ask reconnects after its connection dropped. */
const maxResumes = 5;

/**
 * RagtimeError is how ask rejects: ragtime's error event or error body
 * (code, message, hint, stage, field), the HTTP status when there was one,
 * and the query id when the query had started.
 */
export class RagtimeError extends Error {
  constructor(e, status, queryId) {
    super(e.message || e.code || "ragtime request failed");
    this.name = "RagtimeError";
    this.code = e.code || "unknown";
    this.hint = e.hint || "";
    this.stage = e.stage || "";
    this.field = e.field || "";
    this.status = status || 0;
    this.queryId = queryId || "";
  }
}

/**
 * ask sends one question to ragtime's /ask and resolves with the done
 * event's record (query_id, ttft_ms, retrieval_ms, …, usage, stages).
 *
 * options:
 *   topK, rerankTopN, maxTokens, model, promptNonce — the /ask parameters
 *   filters      — {doc_id: [...], metadata: {k: v}}; metadata needs POST
 *   key          — an API key: rt_pk_… (sent as ?key= over GET) or rt_sk_…
 *                  (sent as Authorization: Bearer, over POST)
 *   method       — "GET" (EventSource) or "POST" (fetch); chosen by default
 *   base         — the server's origin (default: where client.js came from)
 *   signal       — an AbortSignal: aborting closes the stream and rejects
 *                  with the signal's reason (an AbortError by default)
 *   onMeta(meta), onStage(span), onSources(sources), onToken(text),
 *   onReasoning(text), onReconnect({attempt, lastEventId}) — callbacks
 *
 * It rejects with a RagtimeError for ragtime's refusals (HTTP 4xx/5xx
 * before the stream) and error events, and for a connection that could
 * not be resumed.
 */
export function ask(question, options = {}) {
  const o = { base: defaultBase, ...options };
  const filters = o.filters || {};
  const secret = typeof o.key === "string" && o.key.startsWith("rt_sk_");
  const method = (o.method || (secret || (filters.metadata && Object.keys(filters.metadata).length) ? "POST" : "GET")).toUpperCase();
  if (method === "GET" && secret) {
    return Promise.reject(new RagtimeError({ code: "key_in_url", message: "a secret key (rt_sk_…) cannot be sent over GET; use method POST" }));
  }
  if (method === "GET" && filters.metadata && Object.keys(filters.metadata).length) {
    return Promise.reject(new RagtimeError({ code: "filters_invalid", field: "filters.metadata", message: "metadata filters need method POST" }));
  }
  if (o.signal?.aborted) return Promise.reject(abortReason(o.signal));
  if (method === "GET" && typeof EventSource === "function") return viaEventSource(question, o);
  return viaFetch(question, o, method);
}

function abortReason(signal) {
  return signal.reason ?? new DOMException("the ask was aborted", "AbortError");
}

// Event dispatch shared by both transports: callbacks, and the outcome.
function dispatcher(o, resolve, reject) {
  const call = (fn, arg) => { if (typeof fn === "function") fn(arg); };
  let queryId = "";
  return {
    get queryId() { return queryId; },
    // event handles one event; it returns true when the stream is over.
    event(name, data) {
      let v;
      try { v = JSON.parse(data); } catch (e) {
        reject(new RagtimeError({ code: "bad_stream", message: `the ${name} event is not JSON` }, 0, queryId));
        return true;
      }
      switch (name) {
        case "meta": queryId = v.query_id; call(o.onMeta, v); return false;
        case "stage": call(o.onStage, v); return false;
        case "sources": call(o.onSources, v.sources); return false;
        case "token": call(o.onToken, v.text); return false;
        case "reasoning": call(o.onReasoning, v.text); return false;
        case "done": resolve(v); return true;
        case "error": reject(new RagtimeError(v, 0, queryId)); return true;
      }
      return false; // an event this client does not know: ignored
    },
  };
}

function params(question, o) {
  const p = new URLSearchParams({ q: question });
  const put = (name, v) => { if (v !== undefined && v !== null && v !== "") p.set(name, String(v)); };
  put("top_k", o.topK); put("rerank_top_n", o.rerankTopN); put("max_tokens", o.maxTokens);
  put("model", o.model); put("prompt_nonce", o.promptNonce);
  for (const id of o.filters?.doc_id || []) p.append("doc_id", id);
  if (o.key) p.set("key", o.key); // publishable keys only (ask refuses secret ones over GET)
  return p;
}

// viaEventSource asks over GET with the browser's EventSource, which
// reconnects by itself with Last-Event-ID; ragtime resumes the stream, or
// answers 204 when the query has ended, which stops it for good.
function viaEventSource(question, o) {
  return new Promise((resolve, reject) => {
    const url = `${o.base}/ask?${params(question, o)}`;
    const es = new EventSource(url);
    let over = false, opened = false, attempt = 0, lastEventId = "";
    const end = () => { over = true; es.close(); o.signal?.removeEventListener("abort", onAbort); };
    const d = dispatcher(o, v => { end(); resolve(v); }, e => { end(); reject(e); });
    const onAbort = () => { end(); reject(abortReason(o.signal)); };
    o.signal?.addEventListener("abort", onAbort);
    for (const name of ["meta", "stage", "sources", "token", "reasoning", "done"]) {
      es.addEventListener(name, e => {
        if (over) return;
        opened = true;
        lastEventId = e.lastEventId;
        if (d.event(name, e.data)) end();
      });
    }
    es.addEventListener("error", e => {
      if (over) return;
      if (e.data !== undefined) { // ragtime's error event: the stream is over
        d.event("error", e.data);
        return;
      }
      if (!opened) {
        // Refused before the stream started: EventSource cannot read why
        // (a 400, 401, 429 … all look alike), so ask again over fetch,
        // which reads the answer: the same refusal as JSON, or the stream.
        end();
        viaFetch(question, o, "GET").then(resolve, reject);
        return;
      }
      if (es.readyState === EventSource.CLOSED || ++attempt > maxResumes) {
        end();
        reject(new RagtimeError({ code: "stream_lost", message: "the connection dropped and the query ended before it could resume" }, 0, d.queryId));
        return;
      }
      if (typeof o.onReconnect === "function") o.onReconnect({ attempt, lastEventId });
    });
  });
}

// viaFetch asks over fetch (POST, or GET as EventSource's fallback) and
// reads the stream itself; a dropped connection is resumed with
// Last-Event-ID after the stream's retry: delay, as EventSource would.
function viaFetch(question, o, method) {
  return new Promise((resolve, reject) => {
    const ctl = new AbortController();
    let over = false;
    const end = () => { over = true; ctl.abort(); o.signal?.removeEventListener("abort", onAbort); };
    const d = dispatcher(o, v => { end(); resolve(v); }, e => { end(); reject(e); });
    const onAbort = () => { if (!over) { end(); reject(abortReason(o.signal)); } };
    o.signal?.addEventListener("abort", onAbort);

    let url = `${o.base}/ask`, body;
    const headers = { Accept: "text/event-stream" };
    if (o.key) headers.Authorization = "Bearer " + o.key;
    if (method === "GET") {
      const p = params(question, o);
      p.delete("key"); // it goes in the header
      url += "?" + p;
    } else {
      headers["Content-Type"] = "application/json";
      const b = { question, filters: o.filters, model: o.model, prompt_nonce: o.promptNonce,
        top_k: o.topK, rerank_top_n: o.rerankTopN, max_tokens: o.maxTokens };
      for (const k of Object.keys(b)) if (b[k] === undefined || b[k] === null || b[k] === "") delete b[k];
      body = JSON.stringify(b);
    }

    let lastEventId = "", retryMs = 2000, attempt = 0;
    const sleep = ms => new Promise(r => setTimeout(r, ms));
    (async () => {
      for (;;) {
        const h = { ...headers };
        if (lastEventId) h["Last-Event-ID"] = lastEventId;
        let resp;
        try {
          resp = await fetch(url, { method, headers: h, body, signal: ctl.signal, cache: "no-store" });
          if (resp.status === 204) { // the query ended while we were away
            return d.event("error", JSON.stringify({ code: "stream_lost",
              message: "the connection dropped and the query ended before it could resume" }));
          }
          if (!resp.ok) {
            const e = await resp.json().catch(() => null);
            end();
            return reject(new RagtimeError((e && e.error) || { code: "http_" + resp.status, message: resp.statusText }, resp.status, d.queryId));
          }
          const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
          let buf = "";
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += value.replace(/\r\n?/g, "\n");
            let i;
            while ((i = buf.indexOf("\n\n")) >= 0) {
              const block = buf.slice(0, i);
              buf = buf.slice(i + 2);
              let name = "message", id = null;
              const data = [];
              for (const line of block.split("\n")) {
                const c = line.indexOf(":");
                const field = c < 0 ? line : line.slice(0, c);
                const val = c < 0 ? "" : line.slice(c + 1).replace(/^ /, "");
                if (field === "event") name = val;
                else if (field === "data") data.push(val);
                else if (field === "id") id = val;
                else if (field === "retry" && /^\d+$/.test(val)) retryMs = Number(val);
              }
              if (id !== null) lastEventId = id;
              if (data.length && d.event(name, data.join("\n"))) { end(); return; }
              // A callback may have aborted (or the stream ended): the rest
              // of this read is not delivered, as EventSource delivers none.
              if (over) return;
            }
          }
        } catch (e) {
          if (over || ctl.signal.aborted) return;
        }
        if (over) return;
        // The connection ended without done or error: resume from the last
        // event after the server's retry delay, unless nothing had come.
        if (!lastEventId || ++attempt > maxResumes) {
          return d.event("error", JSON.stringify({ code: "stream_lost",
            message: "the connection to ragtime was lost" + (lastEventId ? " and could not be resumed" : " before the stream started") }));
        }
        if (typeof o.onReconnect === "function") o.onReconnect({ attempt, lastEventId });
        await sleep(retryMs);
        if (over) return;
      }
    })();
  });
}
