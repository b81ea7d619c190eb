package lexical

import (
	"reflect"
	"testing"
)

func TestWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", []string{}},
		{"Hello, World!", []string{"hello", "world"}},
		{"Don't stop-me now 42x", []string{"dont", "stop", "me", "now", "42x"}},
		{"TTFT是首字延迟", []string{"ttft", "是", "首", "字", "延", "迟"}},
		{"  \n\t ", []string{}},
	}
	for _, tt := range tests {
		got := Words(tt.in)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Words(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestContentWordsDropsStopwords(t *testing.T) {
	t.Parallel()
	got := ContentWords("What is the time to first token?")
	want := []string{"time", "first", "token"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ContentWords = %q, want %q", got, want)
	}
}

func TestBM25(t *testing.T) {
	t.Parallel()
	docs := [][]string{
		Words("the cat sat on the mat"),
		Words("prefill time grows with prompt tokens"),
		Words("prefill prefill prefill is the prompt pass"),
		{},
	}
	s := NewBM25().Score(Words("prefill prompt"), docs)
	if len(s) != 4 {
		t.Fatalf("got %d scores", len(s))
	}
	if s[0] != 0 || s[3] != 0 {
		t.Errorf("unrelated docs scored: %v", s)
	}
	if !(s[1] > 0 && s[2] > 0) {
		t.Errorf("matching docs not scored: %v", s)
	}
	if s[2] <= s[1]*0.9 {
		t.Errorf("repeated term should not lose much: %v", s)
	}
	if got := NewBM25().Score(nil, docs); got[1] != 0 {
		t.Errorf("empty query scored %v", got)
	}
}

func BenchmarkWords(b *testing.B) {
	text := "Prefill reads the whole prompt in one parallel pass: it is compute-bound, and its cost grows roughly " +
		"quadratically with the number of prompt tokens because attention compares every token with every other."
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Words(text)
	}
}
