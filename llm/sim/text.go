package sim

import (
	"hash/fnv"
	"strings"

	"ragtime/internal/openaiwire"
)

// fallbackWords is drawn from when the prompt has no words of its own.
var fallbackWords = strings.Fields(`the simulator streams these words at a configured pace so clients can
measure time to first token inter token latency and the share of prefill in a retrieval augmented answer
none of it means anything because llmsim is a simulator and not a model`)

// textSource yields the simulated output words for one request: it cycles
// through the words of the last user message, starting at an offset drawn
// from the seed and the whole prompt, so the same prompt always streams the
// same text.
type textSource struct {
	words []string
	off   int
}

func newTextSource(seed int64, msgs []openaiwire.Message) textSource {
	h := fnv.New64a()
	var b [8]byte
	for i := range b {
		b[i] = byte(seed >> (8 * i))
	}
	h.Write(b[:])
	last := ""
	for _, m := range msgs {
		h.Write([]byte(m.Role))
		h.Write([]byte{0})
		h.Write([]byte(m.Content))
		h.Write([]byte{0})
		if m.Role == "user" {
			last = string(m.Content)
		}
	}
	words := strings.Fields(last)
	if len(words) == 0 {
		words = fallbackWords
	}
	return textSource{words: words, off: int(h.Sum64() % uint64(len(words)))}
}

// delta returns the i-th output token (0-based) as streamed: a word, with a
// leading space after the first.
func (t textSource) delta(i int) string {
	w := t.words[(t.off+i)%len(t.words)]
	if i == 0 {
		return w
	}
	return " " + w
}

// word returns the i-th output word without its leading space.
func (t textSource) word(i int) string { return t.words[(t.off+i)%len(t.words)] }
