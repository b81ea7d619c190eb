package tokens

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// DefaultEncoding is the encoding New uses when given an empty name: the one
// of current OpenAI models, close enough for most open models' prompt sizes.
const DefaultEncoding = "o200k_base"

// Encodings lists the encoding names New accepts.
var Encodings = []string{"o200k_base", "cl100k_base", "p50k_base", "r50k_base"}

// encodingSpec is what distinguishes one encoding from another: its
// pre-tokenizer and its special tokens (only decoded: Encode treats their
// markers as text). Its BPE file is <name>.tiktoken (bpefile.go).
type encodingSpec struct {
	pieceEnd func(s string, i int) int
	specials map[int]string
}

var encodingSpecs = map[string]encodingSpec{
	"o200k_base": {o200kPieceEnd, map[int]string{
		199999: "<|endoftext|>", 200018: "<|endofprompt|>"}},
	"cl100k_base": {cl100kPieceEnd, map[int]string{
		100257: "<|endoftext|>", 100258: "<|fim_prefix|>", 100259: "<|fim_middle|>",
		100260: "<|fim_suffix|>", 100276: "<|endofprompt|>"}},
	"p50k_base": {gpt2PieceEnd, map[int]string{50256: "<|endoftext|>"}},
	"r50k_base": {gpt2PieceEnd, map[int]string{50256: "<|endoftext|>"}},
}

// An encoding is one loaded encoding, shared by every Counter of its name:
// loading o200k_base's ranks takes hundreds of milliseconds and tens of
// megabytes, so it happens once per process.
type encoding struct {
	encodingSpec
	ranks map[string]int // token bytes → id

	decodeOnce sync.Once
	byID       []string // id → token bytes, built by the first Decode
}

var (
	encMu     sync.Mutex
	encLoaded = map[string]*encodingOnce{}
)

type encodingOnce struct {
	once sync.Once
	enc  *encoding
	err  error
}

// Counter counts, encodes and decodes tokens of one encoding. It implements
// pipeline.TokenCounter and is safe for concurrent use; the zero value is not
// usable, call New.
type Counter struct {
	name string
	enc  *encoding
}

// New returns a Counter for the named encoding (see Encodings; "" means
// DefaultEncoding). The encoding's BPE table is loaded the first time any
// Counter asks for it and shared afterwards: DefaultEncoding's from the
// binary, another's from the directory BPEDirEnv names.
func New(name string) (*Counter, error) {
	if name == "" {
		name = DefaultEncoding
	}
	spec, ok := encodingSpecs[name]
	if !ok {
		return nil, fmt.Errorf("load token encoding %q: unknown encoding (want one of %v)", name, Encodings)
	}

	encMu.Lock()
	eo, ok := encLoaded[name]
	if !ok {
		eo = &encodingOnce{}
		encLoaded[name] = eo
	}
	encMu.Unlock()

	eo.once.Do(func() {
		loadBMPClasses()
		ranks, err := loadRanks(name)
		if err != nil {
			eo.err = fmt.Errorf("load token encoding %q: %w", name, err)
			return
		}
		eo.enc = &encoding{encodingSpec: spec, ranks: ranks}
	})
	if eo.err != nil {
		return nil, eo.err
	}
	return &Counter{name: name, enc: eo.enc}, nil
}

// Encoding returns the name of the Counter's encoding.
func (c *Counter) Encoding() string { return c.name }

// mergeScratch is how many bytes of a piece Count and Encode merge without
// allocating; longer pieces allocate their parts.
const mergeScratch = 64

// Count returns the number of tokens in text. Special-token markers such as
// "<|endoftext|>" are counted as the ordinary text they are, never rejected,
// so any input is safe. Count("") is 0.
func (c *Counter) Count(text string) int {
	n := 0
	var scratch [mergeScratch + 1]bpePart
	c.enc.eachPiece(text, func(piece string) {
		if _, ok := c.enc.ranks[piece]; ok {
			n++
			return
		}
		n += len(mergePiece(piece, c.enc.ranks, scratch[:0])) - 1
	})
	return n
}

// Encode returns the token ids of text, treating special-token markers as
// ordinary text.
func (c *Counter) Encode(text string) []int {
	var ids []int
	var scratch [mergeScratch + 1]bpePart
	c.enc.eachPiece(text, func(piece string) {
		if id, ok := c.enc.ranks[piece]; ok {
			ids = append(ids, id)
			return
		}
		parts := mergePiece(piece, c.enc.ranks, scratch[:0])
		for j := range len(parts) - 1 {
			ids = append(ids, c.enc.ranks[piece[parts[j].start:parts[j+1].start]])
		}
	})
	return ids
}

// eachPiece calls f with each piece of text, as tiktoken-go's regular
// expression would split it. Like tiktoken-go, which splits []rune(text),
// it sees each byte of invalid UTF-8 as U+FFFD.
func (e *encoding) eachPiece(text string, f func(piece string)) {
	if !utf8.ValidString(text) {
		text = string([]rune(text))
	}
	for i := 0; i < len(text); {
		end := e.pieceEnd(text, i)
		if end == i {
			// No alternative matches: the engine skips the rune.
			_, w := utf8.DecodeRuneInString(text[i:])
			i += w
			continue
		}
		f(text[i:end])
		i = end
	}
}

// Decode returns the text of the given token ids; special tokens decode to
// their markers, ids the encoding does not know to nothing. The first Decode
// of an encoding builds its id → bytes table (one string header per token,
// sharing the rank table's bytes).
func (c *Counter) Decode(ids []int) string {
	e := c.enc
	e.decodeOnce.Do(func() {
		maxID := -1
		for _, id := range e.ranks {
			maxID = max(maxID, id)
		}
		e.byID = make([]string, maxID+1)
		for b, id := range e.ranks {
			e.byID[id] = b
		}
	})
	var out []byte
	for _, id := range ids {
		if id >= 0 && id < len(e.byID) && e.byID[id] != "" {
			out = append(out, e.byID[id]...)
		} else if s, ok := e.specials[id]; ok {
			out = append(out, s...)
		}
	}
	return string(out)
}
