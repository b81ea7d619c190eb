package retrieval

import (
	"context"
	"fmt"
	"math"
	"slices"

	"ragtime/lexical"
	"ragtime/pipeline"
)

var _ pipeline.Embedder = (*HashEmbedder)(nil)

// Embedding dimension bounds accepted by NewHashEmbedder.
const (
	MinHashDimension = 8
	MaxHashDimension = 65536
)

// HashEmbedderName is what HashEmbedder.Name returns and what an index built
// with it records.
const HashEmbedderName = "hash"

// HashEmbedder is a lexical embedder: it hashes the words and word pairs of a
// text into a fixed number of signed buckets (the "hashing trick").
//
// It knows nothing about meaning: texts are close only when they share words
// ("car" and "automobile" are as unrelated as "car" and "banana"). What it
// offers is speed, zero setup and determinism, which makes it a fair
// keyword-level baseline and a stable stand-in when timing the pipeline.
//
// Features are the normalised words of lexical.Words without stopwords (all
// words when a text has nothing else) and the pairs of adjacent such words.
// Each feature is hashed with 64-bit FNV-1a, which picks its bucket and its
// sign, and weighs 1 + ln(tf); the vector is then L2-normalised, so cosine
// similarity is a dot product. An empty text yields the zero vector. The
// output depends only on the text and the dimension: it is the same in every
// process and on every platform.
//
// A HashEmbedder is safe for concurrent use.
type HashEmbedder struct {
	dim int
}

// NewHashEmbedder returns a HashEmbedder producing vectors of dim
// dimensions; dim must lie in [MinHashDimension, MaxHashDimension].
func NewHashEmbedder(dim int) (*HashEmbedder, error) {
	if dim < MinHashDimension || dim > MaxHashDimension {
		return nil, fmt.Errorf("creating hash embedder: dimension %d out of range: --embed-dimensions must be between %d and %d",
			dim, MinHashDimension, MaxHashDimension)
	}
	return &HashEmbedder{dim: dim}, nil
}

// Name returns "hash".
func (e *HashEmbedder) Name() string { return HashEmbedderName }

// Dimension returns the length of the vectors Embed produces.
func (e *HashEmbedder) Dimension() int { return e.dim }

// Embed returns one L2-normalised vector per text, in order. All vectors
// share one backing array.
func (e *HashEmbedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	slab := make([]float32, len(texts)*e.dim)
	var feats []uint64
	for i, text := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("embedding texts: %w", err)
			}
		}
		vec := slab[i*e.dim : (i+1)*e.dim : (i+1)*e.dim]
		feats = e.embedInto(vec, text, feats[:0])
		out[i] = vec
	}
	return out, nil
}

// FNV-1a, 64-bit. Written out rather than using hash/fnv so that a feature
// (a word, or two words with a separator) is hashed without allocating.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// mix64 is MurmurHash3's 64-bit finaliser. FNV-1a's low bits mix poorly,
// and the bucket is taken from them, so the hash is scrambled first.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// embedInto writes the embedding of text into vec (which must be zero) and
// returns feats, reused as scratch space.
func (e *HashEmbedder) embedInto(vec []float32, text string, feats []uint64) []uint64 {
	words := lexical.Words(text)
	content := words[:0:0]
	for _, w := range words {
		if !lexical.IsStopword(w) {
			content = append(content, w)
		}
	}
	if len(content) == 0 {
		content = words
	}
	if len(content) == 0 {
		return feats
	}
	for i, w := range content {
		feats = append(feats, fnvAdd(fnvOffset64, w))
		if i > 0 {
			// A pair hashes as "previous\x00word": the NUL cannot occur in a
			// word, so a pair never collides with a single word by design.
			h := fnvAdd(fnvOffset64, content[i-1])
			h ^= 0
			h *= fnvPrime64
			feats = append(feats, fnvAdd(h, w))
		}
	}
	// Sorting groups equal features so term frequencies are counted without
	// a map; texts have a few hundred features at most.
	slices.Sort(feats)
	dim := uint64(e.dim)
	var sum float64
	for i := 0; i < len(feats); {
		j := i + 1
		for j < len(feats) && feats[j] == feats[i] {
			j++
		}
		h := mix64(feats[i])
		w := float32(1 + math.Log(float64(j-i)))
		if h>>63 == 1 {
			w = -w
		}
		b := (h & (1<<63 - 1)) % dim
		vec[b] += w
		i = j
	}
	for _, v := range vec {
		sum += float64(v) * float64(v)
	}
	if sum > 0 {
		inv := float32(1 / math.Sqrt(sum))
		for i := range vec {
			vec[i] *= inv
		}
	}
	return feats
}
