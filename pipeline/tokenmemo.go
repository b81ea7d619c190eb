package pipeline

import (
	"hash/maphash"
	"sync"
)

// tokenMemo remembers the token count of texts that come back ask after
// ask: the retrieved chunks and their titles. Counting (a regexp
// pre-tokenizer and BPE merges) of the context was a third of ragtime's CPU
// per ask; a chunk's count is now computed the first time it is retrieved
// and looked up after. Keys are 64-bit hashes of the text, so the memo holds
// no text; it is emptied when it reaches memoMax entries.
type tokenMemo struct {
	counter TokenCounter
	seed    maphash.Seed
	mu      sync.RWMutex
	counts  map[uint64]int32
}

// memoMax bounds the memo: 1M entries is about 40 MB at most, far more
// than a corpus's distinct chunks.
const memoMax = 1 << 20

func newTokenMemo(c TokenCounter) *tokenMemo {
	return &tokenMemo{counter: c, seed: maphash.MakeSeed(), counts: map[uint64]int32{}}
}

// CountBytes is Count of string(text), without making the string when
// the count is memoised.
func (m *tokenMemo) CountBytes(text []byte) int {
	if len(text) == 0 {
		return 0
	}
	if n, ok := m.memoised(maphash.Bytes(m.seed, text)); ok {
		return n
	}
	return m.Count(string(text))
}

// memoised is the count memoised under the hash h, if any.
func (m *tokenMemo) memoised(h uint64) (int, bool) {
	m.mu.RLock()
	n, ok := m.counts[h]
	m.mu.RUnlock()
	return int(n), ok
}

// Count returns the token count of text, counting it on first sight.
func (m *tokenMemo) Count(text string) int {
	if text == "" {
		return 0
	}
	h := maphash.String(m.seed, text)
	if n, ok := m.memoised(h); ok {
		return n
	}
	c := m.counter.Count(text)
	m.mu.Lock()
	if len(m.counts) >= memoMax {
		clear(m.counts)
	}
	m.counts[h] = int32(c)
	m.mu.Unlock()
	return c
}
