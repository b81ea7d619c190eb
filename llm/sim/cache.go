package sim

import (
	"container/list"

	"github.com/cespare/xxhash/v2"
)

// blockTokens is the prefix cache's block size in tokens, as in vLLM.
const blockTokens = 16

// blockHashes returns the chain hashes of the full 16-token blocks of ids:
// block i's hash covers its tokens and block i-1's hash, so equal hashes mean
// equal prefixes. The hash (xxHash64) is unseeded: the same prompt hashes
// alike in every run, so prefix routing puts it on the same replica every
// time (maphash's per-process seed spread the same tenants differently on
// each start, and a benchmark's hit rate with them).
func blockHashes(ids []int) []uint64 {
	n := len(ids) / blockTokens
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	var prev uint64
	var buf [8 * (blockTokens + 1)]byte
	for b := range n {
		put64(buf[:], prev)
		for i, id := range ids[b*blockTokens : (b+1)*blockTokens] {
			put64(buf[8*(i+1):], uint64(id))
		}
		prev = xxhash.Sum64(buf[:])
		out[b] = prev
	}
	return out
}

func put64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// prefixCache is an LRU of KV blocks keyed by chain hash. It belongs to one
// engine and is used from that engine's goroutine only.
type prefixCache struct {
	capacity int
	order    *list.List // front = most recently used; values are uint64
	index    map[uint64]*list.Element
	// queries and hits count prompt tokens looked up and found.
	queries, hits int64
}

func newPrefixCache(blocks int) *prefixCache {
	if blocks <= 0 {
		return nil
	}
	return &prefixCache{capacity: blocks, order: list.New(), index: make(map[uint64]*list.Element, blocks)}
}

// lookup returns how many leading blocks of the chain are cached, marking
// them recently used.
func (c *prefixCache) lookup(chain []uint64) int {
	n := 0
	for _, h := range chain {
		el, ok := c.index[h]
		if !ok {
			break
		}
		c.order.MoveToFront(el)
		n++
	}
	c.queries += int64(len(chain) * blockTokens)
	c.hits += int64(n * blockTokens)
	return n
}

// insert caches every block of the chain, evicting the least recently used
// blocks beyond capacity.
func (c *prefixCache) insert(chain []uint64) {
	for _, h := range chain {
		if el, ok := c.index[h]; ok {
			c.order.MoveToFront(el)
			continue
		}
		c.index[h] = c.order.PushFront(h)
		for c.order.Len() > c.capacity {
			last := c.order.Back()
			c.order.Remove(last)
			delete(c.index, last.Value.(uint64))
		}
	}
}
