// The LangChain.js peer of `make bench-peer`: RAG over the same documents as
// ragtime, written the way a LangChain.js user would (the documented
// building blocks, no hand-optimisation): OpenAIEmbeddings and ChatOpenAI
// pointed at the same simulator, an in-memory vector store, and a
// RunnableSequence whose stream is sent as Server-Sent Events.
//
// GET /ask?q=...  ->  event: token (data {"text"}) ..., then event: done
// (or event: error).
//
// Configuration (environment): PEER_ADDR (127.0.0.1:0), PEER_BASE_URL (the
// simulator's /v1), PEER_MODEL, PEER_EMBED_MODEL, PEER_DOCS (a folder of .md
// files), PEER_TOP_K (4), PEER_MAX_TOKENS (64).
import http from "node:http";
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";

import { ChatOpenAI, OpenAIEmbeddings } from "@langchain/openai";
import { MemoryVectorStore } from "@langchain/classic/vectorstores/memory";
import { RecursiveCharacterTextSplitter } from "@langchain/textsplitters";
import { Document } from "@langchain/core/documents";
import { ChatPromptTemplate } from "@langchain/core/prompts";
import { RunnablePassthrough, RunnableSequence } from "@langchain/core/runnables";
import { StringOutputParser } from "@langchain/core/output_parsers";

const env = (name, def) => process.env[name] ?? def;
const [host, port] = env("PEER_ADDR", "127.0.0.1:0").split(":");
const baseURL = env("PEER_BASE_URL", "http://127.0.0.1:8081/v1");
const topK = Number(env("PEER_TOP_K", "4"));

const embeddings = new OpenAIEmbeddings({
  model: env("PEER_EMBED_MODEL", "sim-embed"),
  apiKey: "none",
  configuration: { baseURL },
});
const llm = new ChatOpenAI({
  model: env("PEER_MODEL", "sim"),
  apiKey: "none",
  configuration: { baseURL },
  maxTokens: Number(env("PEER_MAX_TOKENS", "64")),
  temperature: 0,
  streaming: true,
});

async function loadDocs(dir) {
  const docs = [];
  for (const name of (await readdir(dir)).sort()) {
    if (name.endsWith(".md")) {
      const text = await readFile(path.join(dir, name), "utf8");
      docs.push(new Document({ pageContent: text, metadata: { source: name } }));
    }
  }
  return docs;
}

const splitter = new RecursiveCharacterTextSplitter({ chunkSize: 1000, chunkOverlap: 100 });
const chunks = await splitter.splitDocuments(await loadDocs(env("PEER_DOCS", "docs")));
const store = await MemoryVectorStore.fromDocuments(chunks, embeddings);
const retriever = store.asRetriever(topK);

const prompt = ChatPromptTemplate.fromMessages([
  ["system", "Answer the question from the context below. Cite sources as [n].\n\nContext:\n{context}"],
  ["human", "{question}"],
]);
const formatDocs = (docs) => docs.map((d, i) => `[${i + 1}] ${d.pageContent}`).join("\n\n");

const chain = RunnableSequence.from([
  { context: retriever.pipe(formatDocs), question: new RunnablePassthrough() },
  prompt,
  llm,
  new StringOutputParser(),
]);

const sse = (res, event, data) => res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://peer");
  if (url.pathname !== "/ask") {
    res.writeHead(404).end();
    return;
  }
  const question = url.searchParams.get("q");
  if (!question) {
    res.writeHead(400, { "Content-Type": "application/json" }).end(JSON.stringify({ error: "q is required" }));
    return;
  }
  const abort = new AbortController();
  res.on("close", () => abort.abort());
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  try {
    const stream = await chain.stream(question, { signal: abort.signal });
    for await (const text of stream) {
      if (text) sse(res, "token", { text });
    }
    sse(res, "done", {});
  } catch (err) {
    if (!abort.signal.aborted) sse(res, "error", { code: "peer_error", message: String(err?.message ?? err) });
  }
  res.end();
});
server.keepAliveTimeout = 90_000;
server.listen(Number(port), host, () => {
  const a = server.address();
  console.log(`peer serving on http://${a.address}:${a.port} (${chunks.length} chunks)`);
});
