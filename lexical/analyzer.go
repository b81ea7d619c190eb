package lexical

import (
	"strings"
	"sync"

	"github.com/kljensen/snowball/english"
)

// Analyzer is the name of the analyzer Terms applies, as docs and stage
// attrs name it: Words (lower-casing, Unicode letters and digits, one word
// per CJK character), English stop words dropped, then the Snowball
// (Porter2) English stemmer.
const Analyzer = "english-snowball"

// Terms returns the index terms of text under Analyzer, in text order:
// "Configuring the caches" gives "configur", "cach".
func Terms(text string) []string {
	words := Words(text)
	out := words[:0]
	for _, w := range words {
		if IsStopword(w) {
			continue
		}
		out = append(out, Stem(w))
	}
	return out
}

// Stem returns the Snowball English stem of w (already normalised by
// Words). Words that are not plain ASCII letters are returned as they are:
// the English stemmer has nothing to say about "42x" or "首".
func Stem(w string) string {
	if len(w) <= 2 || !asciiLetters(w) {
		return w
	}
	stems.mu.RLock()
	s, ok := stems.m[w]
	stems.mu.RUnlock()
	if ok {
		return s
	}
	s = english.Stem(w, true)
	if s == w {
		s = w // keep one string, not the stemmer's copy
	}
	stems.mu.Lock()
	if len(stems.m) < stemCacheMax {
		stems.m[strings.Clone(w)] = s
	}
	stems.mu.Unlock()
	return s
}

// stemCacheMax bounds the stem cache: a corpus's vocabulary is mostly far
// smaller, and past it words are stemmed each time (some 1 µs a word).
const stemCacheMax = 1 << 18

// stems caches Stem's answers: the stemmer costs a rune slice and several
// passes per word, and a corpus repeats its words endlessly.
var stems = struct {
	mu sync.RWMutex
	m  map[string]string
}{m: make(map[string]string, 1024)}

func asciiLetters(w string) bool {
	for i := 0; i < len(w); i++ {
		if c := w[i]; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
