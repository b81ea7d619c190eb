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
	var sc hashScratch
	for i, text := range texts {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("embedding texts: %w", err)
			}
		}
		vec := slab[i*e.dim : (i+1)*e.dim : (i+1)*e.dim]
		e.embedInto(vec, text, &sc)
		out[i] = vec
	}
	return out, nil
}

// hashScratch is what embedInto reuses from one text to the next: the word
// scanner's buffer and the feature list.
type hashScratch struct {
	words lexical.WordScanner
	feats []uint64
}

// FNV-1a, 64-bit. Written out rather than using hash/fnv so that a feature
// (a word, or two words with a separator) is hashed without allocating.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnvAddBytes(h uint64, s []byte) uint64 {
	for _, c := range s {
		h ^= uint64(c)
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

// embedInto writes the embedding of text into vec (which must be zero),
// with sc as scratch space. Words are hashed as they are scanned, so no
// word becomes a string.
func (e *HashEmbedder) embedInto(vec []float32, text string, sc *hashScratch) {
	feats := sc.features(text, true)
	if len(feats) == 0 {
		// A text of stop words only is embedded by all its words.
		feats = sc.features(text, false)
	}
	if len(feats) == 0 {
		return
	}
	// Sorting groups equal features so term frequencies are counted without
	// a map; texts have a few hundred features at most.
	slices.Sort(feats)
	dim := uint64(e.dim)
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
	var sum float64
	for _, v := range vec {
		sum += float64(v) * float64(v)
	}
	if sum > 0 {
		inv := float32(1 / math.Sqrt(sum))
		for i := range vec {
			vec[i] *= inv
		}
	}
}

// features returns the hashes of text's words (without stop words when
// content is set) and of each pair of adjacent such words, in sc.feats.
func (sc *hashScratch) features(text string, content bool) []uint64 {
	feats := sc.feats[:0]
	sc.words.Reset(text)
	var prev uint64 // the previous word's hash; 0 before the first
	first := true
	for w, ok := sc.words.Next(); ok; w, ok = sc.words.Next() {
		if content && lexical.IsStopwordBytes(w) {
			continue
		}
		h := fnvAddBytes(fnvOffset64, w)
		feats = append(feats, h)
		if !first {
			// A pair hashes as "previous\x00word": the NUL cannot occur in a
			// word, so a pair never collides with a single word by design.
			p := prev
			p ^= 0
			p *= fnvPrime64
			feats = append(feats, fnvAddBytes(p, w))
		}
		prev, first = h, false
	}
	sc.feats = feats
	return feats
}
