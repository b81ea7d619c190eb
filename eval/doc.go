// Package eval measures retrieval quality on a labelled question set (a
// qrels file: question → relevant doc ids, optionally chunk ids): it sends
// each question to a running ragtime's POST /v1/search at one or more
// configurations (retrieval mode, leg depths, reranking) and reports, per
// configuration, hit@1/5/10, MRR@10, nDCG@10 and the server's retrieval
// time p50/p95.
//
// The qrels reader is shared with the sweep, which asks the same files
// through /ask.
package eval
