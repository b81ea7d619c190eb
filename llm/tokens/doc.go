// Package tokens counts, encodes and decodes text with OpenAI's BPE
// encodings (o200k_base by default; cl100k_base, p50k_base, r50k_base),
// giving exactly the ids tiktoken-go's EncodeOrdinary gives. The default
// encoding's BPE file is embedded, so nothing is downloaded at run time; the
// others are read, checksum-verified, from the directory RAGTIME_BPE_DIR
// names (BPEDirEnv): embedding all four would add 3.4 MB to every binary.
//
// It is the one token counter ragtime uses: the assemble stage trims context
// with it and the llmsim simulator prices prefill with it, so both agree.
//
// Encoding is tiktoken's: a pre-tokenizer splits the text into pieces
// (words with their leading space, runs of up to three digits, punctuation,
// whitespace) by the encoding's regular expression, and each piece is
// byte-pair merged by its rank table, a piece found whole in the table
// being one token. The pre-tokenizers here are hand-written, one matcher
// per pattern (pieces.go), instead of running the patterns on a regular
// expression engine: tiktoken-go runs them on regexp2, a backtracking
// engine, which took ~93 % of counting's CPU (~4.4 µs per token, about
// 1 MB/s, paid on every /ask's question, every chat turn's history and
// every ingested chunk), and Go's regexp cannot run them (\s+(?!\S) is a
// lookahead). The matchers reproduce regexp2's semantics (leftmost-first
// alternatives, greedy quantifiers that backtrack, \p{…} and \s read from
// the unicode package's tables as regexp2 reads them, each invalid UTF-8
// byte seen as U+FFFD); the tests hold them to tiktoken-go, kept as the
// oracle, for every encoding: the pieces and the ids of tricky texts and of
// docs/ and the repository's test data, and the fuzz targets
// Fuzz*AgainstOracle (their findings live in testdata/fuzz). See "The
// token counter" in docs/performance.md for the figures.
package tokens
