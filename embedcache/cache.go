// Package embedcache keeps the vectors of recent query texts, so that a
// repeated question is not embedded again: a bounded, expiring LRU in
// front of a pipeline.Embedder, one per replica.
package embedcache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"ragtime/pipeline"
)

var _ pipeline.Embedder = (*Cache)(nil)

// Config configures New.
type Config struct {
	// Embedder, Model and Dimension name the vectors' space: they are part
	// of every key, so a cache never answers for another embedder, model
	// or dimension.
	Embedder  string
	Model     string
	Dimension int
	// Size bounds the entries (at least 1); with the key a 32-byte hash, an
	// entry takes the vector's 4 bytes a dimension plus some 150 bytes.
	Size int
	// TTL drops an entry this long after it was stored (at least 1 ms).
	TTL time.Duration
}

// Stats counts the cache's lookups.
type Stats struct {
	Hits, Misses uint64
	// Entries is how many vectors it holds now.
	Entries int
}

// Cache is a pipeline.Embedder that answers the texts it has embedded
// before from memory and passes the rest to the embedder it wraps. It is
// safe for concurrent use.
type Cache struct {
	next         pipeline.Embedder
	space        [sha256.Size]byte // the hash of embedder, model and dimension
	lru          *expirable.LRU[[sha256.Size]byte, []float32]
	hits, misses atomic.Uint64
}

// New wraps next in a cache.
func New(next pipeline.Embedder, cfg Config) (*Cache, error) {
	switch {
	case next == nil:
		return nil, errors.New("embedcache: no embedder to wrap")
	case cfg.Size < 1:
		return nil, fmt.Errorf("--embed-cache-size must be at least 1, got %d", cfg.Size)
	case cfg.TTL < time.Millisecond:
		return nil, fmt.Errorf("--embed-cache-ttl must be at least 1ms, got %s", cfg.TTL)
	}
	h := sha256.New()
	for _, s := range []string{cfg.Embedder, cfg.Model} {
		_ = binary.Write(h, binary.LittleEndian, uint32(len(s)))
		h.Write([]byte(s))
	}
	_ = binary.Write(h, binary.LittleEndian, int64(cfg.Dimension))
	c := &Cache{next: next, lru: expirable.NewLRU[[sha256.Size]byte, []float32](cfg.Size, nil, cfg.TTL)}
	h.Sum(c.space[:0])
	return c, nil
}

// Normalize is the text a cache embeds and keys for text: trimmed, with
// every run of white space one space. Questions that differ only in their
// spacing share a vector.
func Normalize(text string) string {
	return strings.Join(strings.Fields(text), " ")
}

func (c *Cache) key(norm string) [sha256.Size]byte {
	h := sha256.New()
	h.Write(c.space[:])
	h.Write([]byte(norm))
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// Embed returns the vectors of texts (normalised, Normalize): those in the
// cache from it, the rest from the wrapped embedder in one call, then
// stored. The pipeline.Call in ctx, when there is one, is told whether
// every text was a hit ("hit") or the embedder was called ("miss").
// The vectors returned are copies: a caller may change them.
func (c *Cache) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	keys := make([][sha256.Size]byte, len(texts))
	var missing []string
	var at []int
	for i, t := range texts {
		norm := Normalize(t)
		keys[i] = c.key(norm)
		if v, ok := c.lru.Get(keys[i]); ok {
			out[i] = slices.Clone(v)
			continue
		}
		missing, at = append(missing, norm), append(at, i)
	}
	c.hits.Add(uint64(len(texts) - len(missing)))
	c.misses.Add(uint64(len(missing)))
	call := pipeline.CallFrom(ctx)
	if len(missing) == 0 {
		if call != nil {
			call.Cache = pipeline.CacheHit
		}
		return out, nil
	}
	vecs, err := c.next.Embed(ctx, missing)
	if call != nil {
		call.Cache = pipeline.CacheMiss
	}
	if err != nil {
		return nil, err
	}
	if len(vecs) != len(missing) {
		return nil, fmt.Errorf("embedder returned %d vectors for %d texts", len(vecs), len(missing))
	}
	for j, i := range at {
		c.lru.Add(keys[i], slices.Clone(vecs[j]))
		out[i] = vecs[j]
	}
	return out, nil
}

// Stats returns the counts so far.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), Misses: c.misses.Load(), Entries: c.lru.Len()}
}
