package retrieval

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"ragtime/lexical"
	"ragtime/pipeline"
)

var (
	_ pipeline.LexicalSearcher = (*Index)(nil)
	_ lexical.Stats            = (*Index)(nil)
)

// The embedded store's lexical leg: an inverted index (lexical.Index) over
// every live chunk, derived from the same records as the vectors. It is
// built when the snapshot is read and the log replayed, changed in the same
// critical section as the vectors by every upsert and delete, and rebuilt
// from the new snapshot at each compaction, so an acknowledged write is in
// both legs or in neither by construction (docs/index.md).

// analyseChunk is the lexical view of a chunk: its title field is its
// document's title and its own heading (a Markdown chunk's first line,
// when that is a heading), its body the text.
func analyseChunk(c *pipeline.Chunk) lexical.Doc {
	return lexical.AnalyseFields(c.Text, c.Title, heading(c.Text))
}

// analyseChunkWith is analyseChunk on the analyzer a.
func analyseChunkWith(a *lexical.TermAnalyzer, c *pipeline.Chunk) lexical.Doc {
	return a.Analyse(c.Text, c.Title, heading(c.Text))
}

// AnalyseChunk is the lexical view of a chunk that the embedded store's
// lexical leg indexes, for a store that keeps the leg itself (Qdrant's
// sparse vectors), so both stores see the same terms.
func AnalyseChunk(c *pipeline.Chunk) lexical.Doc { return analyseChunk(c) }

// heading returns text's first line when it is a Markdown ATX heading.
func heading(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	if !strings.HasPrefix(line, "#") {
		return ""
	}
	return strings.TrimLeft(line, "# ")
}

// analyseAll analyses chunks on up to workers goroutines. A chunk costs
// some 40 µs, a goroutine well under 1 µs, so a writer storing one
// document splits even a document of two chunks across the cores (it is on
// its path); a batch of documents analysed side by side already spreads
// over them, and each analyses its own chunks on one.
func analyseAll(chunks []pipeline.Chunk, workers int) []lexical.Doc {
	docs := make([]lexical.Doc, len(chunks))
	if workers = min(workers, len(chunks)); workers <= 1 {
		lexical.WithAnalyzer(func(a *lexical.TermAnalyzer) {
			for i := range chunks {
				docs[i] = analyseChunkWith(a, &chunks[i])
			}
		})
		return docs
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			lexical.WithAnalyzer(func(a *lexical.TermAnalyzer) {
				for i := int(next.Add(1) - 1); i < len(chunks); i = int(next.Add(1) - 1) {
					docs[i] = analyseChunkWith(a, &chunks[i])
				}
			})
		})
	}
	wg.Wait()
	return docs
}

// indexAll files every slot of a freshly read state (every slot live) in
// its lexical index.
func (st *state) indexAll() { st.useLexical(lexicalOf(st.chunks)) }

// lexicalOf returns the lexical index of a freshly read state's chunks,
// slot s (analyseChunk of chunks[s]) filed under id s. Workers analyse
// blocks of chunks across the cores while the caller's goroutine files
// each block, in order, as soon as it is analysed: filing is serial, and
// would otherwise wait for the last block.
func lexicalOf(chunks []pipeline.Chunk) *lexical.Index {
	const block = 64
	blocks := (len(chunks) + block - 1) / block
	docs := make([]lexical.Doc, len(chunks))
	analysed := make([]chan struct{}, blocks)
	for b := range analysed {
		analysed[b] = make(chan struct{})
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), blocks) {
		wg.Go(func() {
			lexical.WithAnalyzer(func(a *lexical.TermAnalyzer) {
				for b := int(next.Add(1) - 1); b < blocks; b = int(next.Add(1) - 1) {
					for i := b * block; i < min((b+1)*block, len(chunks)); i++ {
						docs[i] = analyseChunkWith(a, &chunks[i])
					}
					close(analysed[b])
					// A follower's reload runs this beside a serving
					// index: a search waiting for a core gets one at the
					// end of each block (about a millisecond) rather
					// than of the scheduler's 10 ms slice.
					runtime.Gosched()
				}
			})
		})
	}
	x := lexical.NewIndex()
	for b := range blocks {
		<-analysed[b]
		for i := b * block; i < min((b+1)*block, len(chunks)); i++ {
			x.Add(docs[i], int32(i))
			docs[i] = lexical.Doc{}
		}
	}
	wg.Wait()
	return x
}

// useLexical makes x, which files slot s under id s, the lexical index of
// st, freshly read (every slot live).
func (st *state) useLexical(x *lexical.Index) {
	st.lex = x
	st.lexID = make([]uint32, len(st.chunks), cap(st.alive))
	for s := range st.lexID {
		st.lexID[s] = uint32(s)
	}
}

// LexicalLeg names the embedded store's lexical leg in stage attrs.
const LexicalLeg = "bm25:" + lexical.Analyzer

// SearchText returns the k chunks with the highest BM25 score for the
// question's terms (lexical.Terms) over the whole corpus, best first, with
// Score the BM25 score. A question without a term matches nothing.
func (ix *Index) SearchText(ctx context.Context, question string, k int, filter pipeline.Filter) ([]pipeline.Hit, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("searching the embedded index's words: %w", err)
	}
	terms := lexical.Terms(question)
	if k <= 0 || len(terms) == 0 {
		return nil, nil
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	st := ix.st
	var accept func(int32) bool
	if len(filter.DocIDs) > 0 || len(filter.Metadata) > 0 {
		docs := make(map[string]bool, len(filter.DocIDs))
		for _, id := range filter.DocIDs {
			docs[id] = true
		}
		accept = func(s int32) bool {
			c := &st.chunks[s]
			if len(docs) > 0 && !docs[c.DocID] {
				return false
			}
			for key, want := range filter.Metadata {
				if got, ok := c.Metadata[key]; !ok || got != want {
					return false
				}
			}
			return true
		}
	}
	found := st.lex.Search(terms, min(k, st.live), accept)
	hits := make([]pipeline.Hit, len(found))
	for i, f := range found {
		hits[i] = pipeline.Hit{Chunk: st.chunks[f.Ext], Score: f.Score} // Metadata shared (Searcher's contract)
	}
	return hits, nil
}

// LexicalName implements pipeline.LexicalSearcher.
func (ix *Index) LexicalName() string { return LexicalLeg }

// Docs implements lexical.Stats over the lexical index: the reranker
// scores with the corpus's statistics.
func (ix *Index) Docs() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.st.lex.Docs()
}

// DocFreq implements lexical.Stats.
func (ix *Index) DocFreq(term string) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.st.lex.DocFreq(term)
}

// AvgLen implements lexical.Stats.
func (ix *Index) AvgLen() float64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.st.lex.AvgLen()
}
