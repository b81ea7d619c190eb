package retrieval

import (
	"runtime"
	"sync"
)

// scanBatcher combines the exhaustive scans of searches that overlap in
// time. An exact scan reads every live vector of the slab (a thousand
// chunks at dimension 512 are 2 MB) and is bound by memory, not by the
// arithmetic: when the slab has left the CPU's caches between searches, one
// search's scan cost some 150 µs against 40 µs per query for eight queries
// scored together, each row read once for all of them (1 December, fifth
// session, on the 2-core VM of docs/performance.md). At 100 concurrent
// asks the searches come in waves, so up to half as many scans as there
// are Ps run at once (one on 2 cores: were there one per P, a P would
// seldom be left for a search to arrive and wait on) and a search that
// finds them all busy waits for the next one, which scores it together
// with every other search waiting by then.
//
// Each query is scored by the same simdDot over the same rows, offered to
// its own topK in the same slot order as scanRange would: results are
// identical to a search made alone.
type scanBatcher struct {
	mu      sync.Mutex
	running int          // scans under way
	waiting []*batchScan // searches waiting for the next scan
}

// batchScan is one search in a batch.
type batchScan struct {
	q   []float32
	top topK
	// lead is set, before done is closed, when this search's goroutine is
	// to run the next scan, for itself and everyone waiting.
	lead bool
	done chan struct{}
}

// leadRounds bounds the batches one search's goroutine scans before it
// returns with its own result (found in the first): past it, the scan
// slot passes to a waiting search. A leader that goes on scanning is
// already running; a woken one waits for a P first, which under load
// took milliseconds per hand-off.
const leadRounds = 4

// search scans st for q's k best, alone or in a batch with the searches
// that overlap it. The caller holds the index's read lock, as every search
// in a batch does: they all see the same st.
func (b *scanBatcher) search(st *state, dim int, q []float32, k int) topK {
	me := &batchScan{q: q, top: topK{k: k, items: make([]scored, 0, k)}}
	b.mu.Lock()
	if b.running >= max(1, runtime.GOMAXPROCS(0)/2) {
		me.done = make(chan struct{})
		b.waiting = append(b.waiting, me)
		b.mu.Unlock()
		<-me.done
		if !me.lead {
			return me.top
		}
		b.mu.Lock() // led: take the waiting, itself among them
	} else {
		b.running++
		b.waiting = append(b.waiting, me)
	}
	for round := 1; ; round++ {
		batch := b.waiting
		b.waiting = nil
		b.mu.Unlock()
		st.scanBatch(dim, batch)
		for _, s := range batch {
			if s != me {
				close(s.done)
			}
		}
		b.mu.Lock()
		if len(b.waiting) == 0 {
			b.running--
			b.mu.Unlock()
			return me.top
		}
		if round == leadRounds {
			next := b.waiting[0] // the scan slot passes to it
			b.mu.Unlock()
			next.lead = true
			close(next.done)
			return me.top
		}
	}
}

// scanBatch scores every live slot for each search of batch: one read of
// each row for all of them.
func (st *state) scanBatch(dim int, batch []*batchScan) {
	vecs, alive := st.vecs, st.alive
	if len(batch) == 1 {
		s := batch[0]
		for i := range alive {
			if !alive[i] {
				continue
			}
			x := simdDot(s.q, vecs[i*dim:(i+1)*dim])
			if len(s.top.items) < s.top.k || x > s.top.items[0].score {
				s.top.offer(scored{slot: int32(i), score: x})
			}
		}
		return
	}
	for i := range alive {
		if !alive[i] {
			continue
		}
		row := vecs[i*dim : (i+1)*dim]
		for _, s := range batch {
			x := simdDot(s.q, row)
			if len(s.top.items) < s.top.k || x > s.top.items[0].score {
				s.top.offer(scored{slot: int32(i), score: x})
			}
		}
	}
}
