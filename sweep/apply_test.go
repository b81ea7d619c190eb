package sweep

import (
	"strings"
	"testing"

	"ragtime"
	"ragtime/internal/golden"
)

// TestWriteApply: how the sweep prints its recommendation (serve's flags,
// the --config snippet, the sweep that confirms it), against golden files
// (go test ./sweep -run TestWriteApply -update rewrites them).
func TestWriteApply(t *testing.T) {
	t.Parallel()
	redact := func(u string) string { return strings.ReplaceAll(u, "s3cret", "xxxxx") }
	for _, tt := range []struct {
		name    string
		setting Setting
		args    []string
	}{
		// Against a server: no budget, the URL's value a separate argument.
		{"apply_server.golden", Setting{TopK: 8, RerankTopN: 3},
			[]string{"--database-url", "postgres://u:s3cret@h/db", "--top-k=1,2", "--out", "x", "--runs", "2"}},
		// In process: a budget and a retrieval, every knob the setting
		// replaces dropped from the rerun (both spellings), a value that
		// needs quoting quoted, the URL given with "=".
		{"apply_full.golden", Setting{TopK: 10, RerankTopN: 0, MaxContextTokens: 3000, Retrieval: ragtime.RetrievalHybrid, VectorK: 20, LexicalK: 40},
			[]string{"--database-url=postgres://u:s3cret@h/db", "--questions", "my questions.txt", "--top-k", "5,10", "--rerank-top-n=0,3",
				"--max-context-tokens", "1500,3000", "--retrieval", "vector,hybrid", "--vector-k=20", "--lexical-k", "40", "--runs", "3"}},
		{"apply_no_args.golden", Setting{TopK: 5, RerankTopN: 5, Retrieval: ragtime.RetrievalLexical}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			WriteApply(&b, tt.setting, tt.args, redact)
			if strings.Contains(b.String(), "s3cret") {
				t.Errorf("the password is printed:\n%s", b.String())
			}
			golden.Check(t, tt.name, []byte(b.String()))
		})
	}
}
