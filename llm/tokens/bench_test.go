package tokens

import (
	"strconv"
	"strings"
	"testing"
)

func BenchmarkCount(b *testing.B) {
	c, err := New("")
	if err != nil {
		b.Fatal(err)
	}
	for _, words := range []int{300, 8000} {
		text := strings.Repeat("Prefill reads the whole prompt in one parallel pass. ", words/9)
		n := c.Count(text)
		b.Run(strconv.Itoa(n)+"tokens", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				c.Count(text)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
		})
	}
}
