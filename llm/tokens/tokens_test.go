package tokens

import (
	"strings"
	"sync"
	"testing"

	"ragtime/pipeline"
)

var _ pipeline.TokenCounter = (*Counter)(nil)

func TestCount(t *testing.T) {
	t.Parallel()
	c, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	if c.Encoding() != DefaultEncoding {
		t.Fatalf("encoding %q, want %q", c.Encoding(), DefaultEncoding)
	}
	tests := []struct {
		text string
		want int
	}{
		{"", 0},
		{"hello", 1},
		{"hello world", 2},
		// special-token markers are plain text, several tokens, never a panic
		{"<|endoftext|>", 7},
	}
	for _, tt := range tests {
		if got := c.Count(tt.text); got != tt.want {
			t.Errorf("Count(%q) = %d, want %d", tt.text, got, tt.want)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Time to first token is set by input length.", "首个令牌的时间", "a  b\n\tc <|endoftext|>"} {
		ids := c.Encode(s)
		if len(ids) != c.Count(s) {
			t.Errorf("Encode(%q) has %d ids, Count says %d", s, len(ids), c.Count(s))
		}
		if got := c.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
}

func TestEncodingsDiffer(t *testing.T) {
	t.Parallel()
	o, err := New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := New("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	s := "प्रीफ़िल समय"
	if o.Count(s) == cl.Count(s) {
		t.Errorf("o200k_base and cl100k_base both count %d tokens for %q; the encodings are not distinct", o.Count(s), s)
	}
}

func TestUnknownEncoding(t *testing.T) {
	t.Parallel()
	if _, err := New("nope_base"); err == nil || !strings.Contains(err.Error(), "unknown encoding") {
		t.Fatalf("New(nope_base) error = %v, want unknown encoding", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("retrieval plus long context ", 50)
	want := c.Count(text)
	var wg sync.WaitGroup
	errs := make(chan int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c2, err := New("")
			if err != nil {
				errs <- -1
				return
			}
			for range 20 {
				if n := c2.Count(text); n != want {
					errs <- n
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for n := range errs {
		t.Errorf("concurrent Count = %d, want %d", n, want)
	}
}
