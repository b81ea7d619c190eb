package tokens

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCount counts prose (a question's worth and a long context's) and
// one 16 KiB piece (a run of lower-case letters, as in a blob of
// hexadecimal or base64-like text), which costs its length squared to merge
// by tiktoken's scan. cpu-ns/token (this process's CPU per token) depends
// less than ns/token on how much of the machine the benchmark gets.
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
			cpu := processCPU()
			for b.Loop() {
				c.Count(tt.text)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
			b.ReportMetric(float64((processCPU()-cpu).Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/token")
		})
	}
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
