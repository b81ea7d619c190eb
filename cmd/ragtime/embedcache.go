package main

import (
	"flag"
	"fmt"
	"time"

	"ragtime/embedcache"
	"ragtime/pipeline"
)

// embedCacheConfig holds serve's query-embedding cache flags.
type embedCacheConfig struct {
	size int
	ttl  time.Duration
}

func (c *embedCacheConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.size, "embed-cache-size", 1024, "questions whose vectors this replica keeps, so a repeated question is not embedded again (least recently used dropped first; about 4 bytes a dimension plus 150 each; 0: off; the hash embedder is never cached)")
	fs.DurationVar(&c.ttl, "embed-cache-ttl", 10*time.Minute, "how long a question's vector is kept in the embedding cache")
}

func (c *embedCacheConfig) valid(problems map[string]string) {
	if c.size < 0 {
		problems["embed-cache-size"] = fmt.Sprintf("--embed-cache-size must not be negative, got %d", c.size)
	}
	if c.size > 0 && c.ttl < time.Millisecond {
		problems["embed-cache-ttl"] = fmt.Sprintf("--embed-cache-ttl must be at least 1ms, got %s", c.ttl)
	}
}

// wrap returns the pipeline's embedder: p's, behind a cache when one is
// configured and the embedder is remote (the hash embedder computes a
// vector in about the time a lookup takes), and the cache (nil when none).
func (c *embedCacheConfig) wrap(p *parts, pc *partsConfig) (pipeline.Embedder, *embedcache.Cache, error) {
	if c.size == 0 || pc.embedder == "hash" {
		return p.embedder, nil, nil
	}
	cache, err := embedcache.New(p.embedder, embedcache.Config{
		Embedder: p.embedderName, Model: pc.embedModel, Dimension: p.embedDim, Size: c.size, TTL: c.ttl,
	})
	if err != nil {
		return nil, nil, &usageError{msg: err.Error()}
	}
	return cache, cache, nil
}
