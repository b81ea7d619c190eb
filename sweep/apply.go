package sweep

import (
	"fmt"
	"io"
	"strings"

	"ragtime/internal/shell"
)

// WriteApply prints how to apply the recommended setting rs (serve's flags
// and the --config snippet, which set the defaults an ask without top_k or
// rerank_top_n gets) and the sweep that measures it alone to confirm it:
// args (the sweep's own arguments) with the knob lists replaced by the
// recommended values. redact hides the password in --database-url's value
// (postgres.RedactURL).
func WriteApply(w io.Writer, rs Setting, args []string, redact func(databaseURL string) string) {
	flags := fmt.Sprintf("--top-k %d --rerank-top-n %d", rs.TopK, rs.RerankTopN)
	snippet := fmt.Sprintf("  [serve]\n  top_k = %d\n  rerank_top_n = %d\n", rs.TopK, rs.RerankTopN)
	if rs.MaxContextTokens > 0 {
		flags += fmt.Sprintf(" --max-context-tokens %d", rs.MaxContextTokens)
		snippet += fmt.Sprintf("  max_context_tokens = %d\n", rs.MaxContextTokens)
	}
	if rs.Retrieval != "" {
		flags += " --retrieval " + rs.Retrieval
		snippet += fmt.Sprintf("  retrieval = %q\n", rs.Retrieval)
	}
	if rs.VectorK > 0 {
		flags += fmt.Sprintf(" --vector-k %d", rs.VectorK)
		snippet += fmt.Sprintf("  vector_k = %d\n", rs.VectorK)
	}
	if rs.LexicalK > 0 {
		flags += fmt.Sprintf(" --lexical-k %d", rs.LexicalK)
		snippet += fmt.Sprintf("  lexical_k = %d\n", rs.LexicalK)
	}
	fmt.Fprintf(w, "\napply the recommendation: ragtime serve %s\nor in serve's --config file (TOML):\n%s", flags, snippet)
	rerun := []string{"ragtime", "sweep"}
	skip := map[string]bool{"top-k": true, "rerank-top-n": true, "max-context-tokens": true, "out": true,
		"retrieval": true, "vector-k": true, "lexical-k": true}
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && skip[name] {
			if !hasValue {
				i++ // the value follows
			}
			continue
		}
		arg := args[i]
		if name == "database-url" { // the URL may carry a password
			if hasValue {
				arg = args[i][:strings.Index(args[i], "=")+1] + redact(args[i][strings.Index(args[i], "=")+1:])
			} else if i+1 < len(args) {
				rerun = append(rerun, arg)
				i++
				arg = redact(args[i])
			}
		}
		rerun = append(rerun, shell.Quote(arg))
	}
	rerun = append(rerun, strings.Fields(flags)...)
	fmt.Fprintf(w, "confirm it with a sweep of that setting alone:\n  %s\n", strings.Join(rerun, " "))
}
