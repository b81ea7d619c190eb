package llm

import (
	"fmt"
	"strings"
	"testing"
)

// TestLongLineInTinyReads: a 300 KB token that arrives one byte per read
// (a slow or hostile upstream) parses to that token, for both framings.
// BenchmarkLongLineInTinyReads shows the cost is linear in the line.
func TestLongLineInTinyReads(t *testing.T) {
	t.Parallel()
	tok := strings.Repeat("x", 300_000)
	for name, c := range map[string]struct {
		newStream streamFactory
		body      []byte
	}{
		"openai": {openaiDialect{}.newStream2, openAIStream([]string{tok, "end"}, []bool{false, false})},
		"ollama": {ollamaDialect{}.newStream2, ollamaStreamBody([]string{tok, "end"}, []bool{false, false})},
	} {
		t.Run(name, func(t *testing.T) {
			checkTokens(t, c.newStream, c.body, []byte{0}, []string{tok, "end"}, []bool{false, false})
		})
	}
}

func BenchmarkLongLineInTinyReads(b *testing.B) {
	for _, n := range []int{100_000, 400_000} {
		body := openAIStream([]string{strings.Repeat("x", n)}, []bool{false})
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := parseAll(openaiDialect{}.newStream2, &chunkedReader{data: body, sizes: []byte{0}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
