package tokens

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkCount counts prose (a question's worth and a long context's) and
// one 16 KiB piece (a run of lower-case letters, as in a blob of
// hexadecimal or base64-like text), which costs its length squared to merge
// by tiktoken's scan.
func BenchmarkCount(b *testing.B) {
	c, err := New("")
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	blob := make([]byte, 16<<10)
	for i := range blob {
		blob[i] = "abcdefghijklmnopqrstuvwxyz"[rng.IntN(26)]
	}
	texts := []struct{ name, text string }{
		{"prose", strings.Repeat("Prefill reads the whole prompt in one parallel pass. ", 300/9)},
		{"prose", strings.Repeat("Prefill reads the whole prompt in one parallel pass. ", 8000/9)},
		{"piece", string(blob)},
	}
	for _, tt := range texts {
		n := c.Count(tt.text)
		b.Run(tt.name+"/"+strconv.Itoa(n)+"tokens", func(b *testing.B) {
			b.SetBytes(int64(len(tt.text)))
			for b.Loop() {
				c.Count(tt.text)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
		})
	}
}
