package pipeline

import (
	"strconv"
	"strings"
)

// The prompt: the system instructions, the history and the ranked sources,
// assembled under the context budget.

// promptParts is what assemble produces.
type promptParts struct {
	messages      []Message
	sources       []Source
	contextTokens int
	promptTokens  int
	dropped       int
	// prefixTokens count the prompt before the retrieved context (system
	// prompt and history): what a server's prefix cache may hold.
	prefixTokens int
}

// Per-message framing tokens of the chat format (OpenAI's counting guide:
// about 3 per message plus 3 to prime the reply).
const (
	tokensPerMessage = 3
	tokensReplyPrime = 3
)

// assemble builds the prompt: system instructions first (stable, so a
// provider's prefix cache can reuse it), then the conversation's earlier
// messages (Request.History, which only grows from turn to turn), then one
// user message with the sources in rank order and the question last. It drops the lowest-ranked chunks that do not fit
// the context budget, and trims a lone first chunk that alone exceeds it.
func (q *query) assemble(hits []Hit) promptParts {
	cfg := q.p.cfg
	var parts promptParts
	// A kept source's block is its header ("[n] title\n") and its text; the
	// two are counted apart, each looked up in the memo (the same chunks
	// come back ask after ask; both end at a newline, where the tokenizer
	// splits anyway), and written into the user message without a string
	// of their own.
	texts := make([]string, 0, len(hits))
	parts.sources = make([]Source, 0, len(hits))
	var header []byte
	budget := q.budget()
	for i, h := range hits {
		header = appendSourceHeader(header[:0], len(texts)+1, h.Title)
		n := q.p.memo.CountBytes(header) + q.p.memo.Count(h.Text)
		if parts.contextTokens+n > budget {
			if len(texts) > 0 {
				parts.dropped = len(hits) - i
				break
			}
			h.Text = trimToTokens(cfg.Counter, h.Text, budget-cfg.Counter.Count(sourceBlock(1, h.Title, "")))
			n = cfg.Counter.Count(sourceBlock(1, h.Title, h.Text))
		}
		texts = append(texts, h.Text)
		parts.contextTokens += n
		parts.sources = append(parts.sources, Source{
			Rank: len(texts), ChunkID: h.ID, DocID: h.DocID, Title: h.Title,
			Score: h.Score, RerankScore: h.RerankScore, Legs: h.Legs, Text: h.Text,
		})
	}
	var user strings.Builder
	size := len("Request \n\nSources:\n\nQuestion: ") + len(q.req.PromptNonce) + len(noSources) + len(q.req.Question)
	for i, src := range parts.sources {
		size += len("[] \n\n\n") + len(strconv.Itoa(i+1)) + len(src.Title) + len(texts[i])
	}
	user.Grow(size) // once: the context is most of a prompt's bytes
	if q.req.PromptNonce != "" {
		// first, so nothing after the system prompt matches an earlier prompt
		user.WriteString("Request ")
		user.WriteString(q.req.PromptNonce)
		user.WriteString("\n\n")
	}
	user.WriteString("Sources:\n\n")
	for i, src := range parts.sources {
		header = appendSourceHeader(header[:0], i+1, src.Title)
		user.Write(header)
		user.WriteString(texts[i])
		user.WriteString("\n\n")
	}
	if len(texts) == 0 {
		user.WriteString(noSources)
		parts.contextTokens = q.p.memo.Count(noSources)
	}
	user.WriteString("Question: ")
	user.WriteString(q.req.Question)
	parts.messages = make([]Message, 0, 2+len(q.req.History))
	parts.messages = append(parts.messages, Message{Role: "system", Content: cfg.SystemPrompt})
	historyTokens := 0
	for _, m := range q.req.History {
		parts.messages = append(parts.messages, m)
		historyTokens += tokensPerMessage + cfg.Counter.Count(m.Content)
	}
	parts.messages = append(parts.messages, Message{Role: "user", Content: user.String()})
	parts.prefixTokens = tokensReplyPrime + 2*tokensPerMessage + q.p.systemTokens + historyTokens
	// The user message is counted from its parts, so the context is not
	// tokenized a second time.
	parts.promptTokens = tokensReplyPrime + 2*tokensPerMessage + q.p.systemTokens + historyTokens + q.p.frameTokens +
		parts.contextTokens + len(texts)*q.p.sepTokens + cfg.Counter.Count("Question: "+q.req.Question)
	return parts
}

// noSources stands in the user message for an empty context.
const noSources = "(no sources were found)\n\n"

// sourceBlock is source n's block in the user message: its header and text.
func sourceBlock(n int, title, text string) string {
	return string(appendSourceHeader(nil, n, title)) + text
}

// appendSourceHeader appends source n's header, "[n] title\n", to b.
func appendSourceHeader(b []byte, n int, title string) []byte {
	b = append(b, '[')
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, "] "...)
	b = append(b, title...)
	return append(b, '\n')
}

// trimToTokens cuts text at a word boundary so that it counts at most limit
// tokens, by halving search over the word count.
func trimToTokens(c TokenCounter, text string, limit int) string {
	if limit <= 0 {
		return ""
	}
	words := strings.Fields(text)
	lo, hi := 0, len(words)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if c.Count(strings.Join(words[:mid], " ")) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return strings.Join(words[:lo], " ")
}
