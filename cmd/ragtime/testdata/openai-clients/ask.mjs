// Asks ragtime's /v1/chat/completions through one real OpenAI-compatible
// client and prints what the client got as one JSON object, for
// cmd/ragtime TestOpenAIClients to check against Postgres.
//
//   node ask.mjs <mode>
//
// mode: openai-stream, openai-complete, openai-errors (the official openai
// SDK), vercel (the Vercel AI SDK's streamText over @ai-sdk/openai's chat
// completions model), vercel-default (its default model, which calls
// /v1/responses: the error the SDK shows), langchain (LangChain.js
// ChatOpenAI).
// Environment: RAGTIME_URL (http://127.0.0.1:port), RAGTIME_KEY,
// RAGTIME_MODEL, QUESTION.
//
// Output: {"answer", "header_query_id", "ragtime" (the extension object of
// the final chunk or of the completion), ...}.
import OpenAI from "openai";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";
import { ChatOpenAI } from "@langchain/openai";
import { AIMessage, HumanMessage, SystemMessage } from "@langchain/core/messages";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const baseURL = env("RAGTIME_URL") + "/v1";
const apiKey = env("RAGTIME_KEY");
const model = env("RAGTIME_MODEL");
const question = env("QUESTION");

// The earlier turns every client sends, kept as history in the prompt.
const history = [
  { role: "system", content: "Answer briefly." },
  { role: "user", content: "What is TTFT?" },
  { role: "assistant", content: "The time to the first token." },
];

// dataLines returns the JSON objects of an SSE body's data: lines.
function dataLines(text) {
  return text.split("\n")
    .filter((l) => l.startsWith("data: ") && l !== "data: [DONE]")
    .map((l) => JSON.parse(l.slice(6)));
}

// tap is a fetch that keeps the response's query id header and a copy of
// its body, for clients that expose neither (LangChain).
function tap() {
  const seen = { queryId: null, body: null };
  const tapped = async (input, init) => {
    const res = await fetch(input, init);
    seen.queryId = res.headers.get("x-ragtime-query-id");
    if (!res.body) return res;
    const [mine, theirs] = res.body.tee();
    seen.body = new Response(mine).text();
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return { fetch: tapped, seen };
}

async function openaiStream() {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const { data: stream, response } = await client.chat.completions.create({
    model,
    messages: [...history, { role: "user", content: question }],
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 24,
    ragtime: { top_k: 3, rerank_top_n: 2 },
  }).withResponse();
  let answer = "", role = null, finish = null, usage = null, ragtime = null, chunks = 0, ids = new Set();
  for await (const chunk of stream) {
    chunks++;
    ids.add(chunk.id);
    if (chunk.object !== "chat.completion.chunk") throw new Error("chunk object " + chunk.object);
    const choice = chunk.choices[0];
    if (choice?.delta?.role) role = choice.delta.role;
    if (choice?.delta?.content) answer += choice.delta.content;
    if (choice?.finish_reason) finish = choice.finish_reason;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.ragtime) ragtime = chunk.ragtime;
  }
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  const retrieved = (await client.models.retrieve(models[models.length - 1])).id;
  return { answer, role, finish, usage, ragtime, chunks, ids: [...ids], retrieved,
    header_query_id: response.headers.get("x-ragtime-query-id"), models };
}

async function openaiComplete() {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const { data, response } = await client.chat.completions.create({
    model,
    messages: [...history, { role: "user", content: question }],
    max_completion_tokens: 24,
  }).withResponse();
  return { answer: data.choices[0].message.content, role: data.choices[0].message.role,
    finish: data.choices[0].finish_reason, object: data.object, id: data.id, usage: data.usage,
    ragtime: data.ragtime, header_query_id: response.headers.get("x-ragtime-query-id") };
}

// openaiErrors sends requests ragtime refuses and reports how the SDK saw
// each: its error class, status, code and param.
async function openaiErrors() {
  const seen = async (client, params) => {
    try {
      const res = await client.chat.completions.create(params);
      if (params.stream) for await (const _ of res) { /* the error comes mid-stream */ }
      return { ok: true };
    } catch (err) {
      if (!(err instanceof OpenAI.APIError)) throw err;
      return { class: err.constructor.name, status: err.status, code: err.code, param: err.param, type: err.type, message: err.message };
    }
  };
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const wrongKey = new OpenAI({ baseURL, apiKey: "rt_sk_aaaaaaaaaaaa_" + "A".repeat(43), maxRetries: 0 });
  const ask = { model, messages: [{ role: "user", content: question }] };
  return {
    top_k: await seen(client, { ...ask, ragtime: { top_k: 0 } }),
    unknown: await seen(client, { ...ask, tools: [{ type: "function", function: { name: "f" } }] }),
    model: await seen(client, { ...ask, model: "not-allowed" }),
    last_role: await seen(client, { ...ask, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }] }),
    auth: await seen(wrongKey, ask),
    // The model server refuses the model after the stream started: an
    // error line in place of the rest of the stream.
    upstream: await seen(client, { ...ask, model: process.env.UPSTREAM_REFUSES, stream: true }),
  };
}

async function vercel() {
  const provider = createOpenAI({ baseURL, apiKey });
  const result = streamText({
    model: provider.chat(model),
    system: history[0].content,
    messages: [...history.slice(1), { role: "user", content: question }],
    maxOutputTokens: 24,
    stopSequences: ["\n\nQuestion:"], // sent as stop, with seed
    seed: 7,
    maxRetries: 0,
    includeRawChunks: true,
  });
  let answer = "", ragtime = null, finish = null, raw = 0, error = null;
  for await (const part of result.fullStream) {
    switch (part.type) {
      case "text-delta": answer += part.text; break;
      case "raw": raw++; if (part.rawValue?.ragtime) ragtime = part.rawValue.ragtime; break;
      case "finish": finish = part.finishReason; break;
      case "error": error = String(part.error); break;
    }
  }
  if (error) throw new Error("streamText: " + error);
  const response = await result.response;
  return { answer, finish, raw, ragtime, usage: await result.usage,
    header_query_id: response.headers?.["x-ragtime-query-id"] ?? null };
}

// vercelDefault asks through the provider's default model, openai(model),
// which speaks OpenAI's Responses API (POST /v1/responses), and reports the
// error the SDK raises.
async function vercelDefault() {
  const provider = createOpenAI({ baseURL, apiKey });
  try {
    await generateText({ model: provider(model), prompt: question, maxRetries: 0 });
    return { ok: true };
  } catch (err) {
    return { status: err.statusCode ?? null, url: err.url ?? null, message: err.message };
  }
}

async function langchain() {
  const t = tap();
  const llm = new ChatOpenAI({ model, apiKey, maxTokens: 24, maxRetries: 0, configuration: { baseURL, fetch: t.fetch } });
  const stream = await llm.stream([
    new SystemMessage(history[0].content), new HumanMessage(history[1].content), new AIMessage(history[2].content),
    new HumanMessage(question),
  ], { stop: ["\n\nQuestion:"] });
  let answer = "", usage = null;
  for await (const chunk of stream) {
    answer += chunk.content;
    if (chunk.usage_metadata) usage = chunk.usage_metadata;
  }
  const chunks = dataLines(await t.seen.body);
  const last = chunks[chunks.length - 1];
  return { answer, usage, ragtime: last?.ragtime ?? null, header_query_id: t.seen.queryId };
}

const modes = { "openai-stream": openaiStream, "openai-complete": openaiComplete, "openai-errors": openaiErrors, vercel,
  "vercel-default": vercelDefault, langchain };
const mode = process.argv[2];
if (!modes[mode]) {
  console.error(`unknown mode ${mode}; one of ${Object.keys(modes).join(", ")}`);
  process.exit(2);
}
try {
  process.stdout.write(JSON.stringify(await modes[mode]()) + "\n");
} catch (err) {
  console.error(`${mode}: ${err?.stack ?? err}`);
  process.exit(1);
}
