package tokens

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// DefaultEncoding is the encoding New uses when given an empty name: the one
// of current OpenAI models, close enough for most open models' prompt sizes.
const DefaultEncoding = "o200k_base"

// Encodings lists the encoding names New accepts.
var Encodings = []string{"o200k_base", "cl100k_base", "p50k_base", "r50k_base"}

// loaderOnce installs the offline BPE loader exactly once, before the first
// encoding is built, so tiktoken-go never tries the network.
var loaderOnce sync.Once

// encodings caches one loaded encoding per name: loading o200k_base takes
// hundreds of milliseconds and tens of megabytes, so it happens once per
// process however many Counters are made.
var (
	encMu     sync.Mutex
	encLoaded = map[string]*encodingOnce{}
)

type encodingOnce struct {
	once sync.Once
	tk   *tiktoken.Tiktoken
	err  error
}

// Counter counts, encodes and decodes tokens of one encoding. It implements
// pipeline.TokenCounter and is safe for concurrent use; the zero value is not
// usable, call New.
type Counter struct {
	name string
	tk   *tiktoken.Tiktoken
}

// New returns a Counter for the named encoding (see Encodings; "" means
// DefaultEncoding). The encoding's BPE table is loaded from the binary the
// first time any Counter asks for it and shared afterwards.
func New(encoding string) (*Counter, error) {
	if encoding == "" {
		encoding = DefaultEncoding
	}
	known := false
	for _, e := range Encodings {
		if e == encoding {
			known = true
			break
		}
	}
	if !known {
		return nil, fmt.Errorf("load token encoding %q: unknown encoding (want one of %v)", encoding, Encodings)
	}
	loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })

	encMu.Lock()
	eo, ok := encLoaded[encoding]
	if !ok {
		eo = &encodingOnce{}
		encLoaded[encoding] = eo
	}
	encMu.Unlock()

	eo.once.Do(func() {
		eo.tk, eo.err = tiktoken.GetEncoding(encoding)
		if eo.err != nil {
			eo.err = fmt.Errorf("load token encoding %q: %w", encoding, eo.err)
		}
	})
	if eo.err != nil {
		return nil, eo.err
	}
	return &Counter{name: encoding, tk: eo.tk}, nil
}

// Encoding returns the name of the Counter's encoding.
func (c *Counter) Encoding() string { return c.name }

// Count returns the number of tokens in text. Special-token markers such as
// "<|endoftext|>" are counted as the ordinary text they are, never rejected,
// so any input is safe. Count("") is 0.
func (c *Counter) Count(text string) int {
	if text == "" {
		return 0
	}
	return len(c.tk.EncodeOrdinary(text))
}

// Encode returns the token ids of text, treating special-token markers as
// ordinary text.
func (c *Counter) Encode(text string) []int {
	if text == "" {
		return nil
	}
	return c.tk.EncodeOrdinary(text)
}

// Decode returns the text of the given token ids; ids the encoding does not
// know decode to nothing.
func (c *Counter) Decode(ids []int) string {
	return c.tk.Decode(ids)
}
