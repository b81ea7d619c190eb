package openai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fastjson"

	"ragtime"
	"ragtime/internal/upstream"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

var _ pipeline.Embedder = (*Embedder)(nil)

// Config configures New.
type Config struct {
	// BaseURL is the API root; /embeddings is appended
	// (e.g. https://api.openai.com/v1, http://127.0.0.1:8000/v1).
	BaseURL string
	// Model is the embedding model.
	Model string
	// Dimensions asks the model for vectors of this length (models that
	// support it, such as text-embedding-3-*); 0 leaves the model's own.
	Dimensions int
	// APIKey is sent as a bearer token; KeyVar names the variable it came
	// from, for error hints.
	APIKey string
	KeyVar string
	// BatchSize bounds the texts per request (0: 64).
	BatchSize int
	// Timeout bounds each request, retries included (0: 60 s).
	Timeout time.Duration
	// Pool holds the shared keep-alive transport of the server's host;
	// nil means upstream.Default().
	Pool *upstream.Pool
}

// Embedder calls an OpenAI-compatible /embeddings endpoint. It is safe for
// concurrent use.
//
// It is a small client of its own on the upstream layer (it used to be
// langchaingo's, which reports a failure only as text and hides the
// connection it used): one POST per batch, retried when idempotently safe,
// timed with httptrace.
type Embedder struct {
	cfg    Config
	remote retrieval.RemoteEmbedder
	// floats is set once the server refused encoding_format "base64": it
	// is then asked for the default, arrays of numbers.
	floats atomic.Bool
}

// New returns an Embedder; it makes no request.
func New(cfg Config) (*Embedder, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("--embed-base-url is required for --embedder openai (e.g. https://api.openai.com/v1)")
	}
	if err := retrieval.CheckBaseURL(cfg.BaseURL); err != nil {
		return nil, err
	}
	if cfg.Model == "" {
		return nil, errors.New("--embed-model is required for --embedder openai (e.g. text-embedding-3-small)")
	}
	if cfg.Dimensions < 0 {
		return nil, fmt.Errorf("--embed-dimensions %d must not be negative", cfg.Dimensions)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.Pool == nil {
		cfg.Pool = upstream.Default()
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Embedder{cfg: cfg, remote: retrieval.RemoteEmbedder{
		Provider: "openai", BaseURL: cfg.BaseURL, Model: cfg.Model, Key: strings.TrimSpace(cfg.APIKey), KeyVar: cfg.KeyVar,
		Timeout: cfg.Timeout, HTTP: cfg.Pool.Client(cfg.BaseURL),
	}}, nil
}

// Name identifies the embedder and model, as recorded by the stores.
func (e *Embedder) Name() string { return "openai:" + e.cfg.Model }

type request struct {
	Input      []string `json:"input"`
	Model      string   `json:"model"`
	Dimensions int      `json:"dimensions,omitempty"`
	// EncodingFormat "base64" asks for each vector as the base64 of its
	// little-endian float32s (as OpenAI's own SDKs do): a third of the
	// bytes of decimal numbers, and no float parsing. Servers that ignore
	// it answer with numbers, which are read as well.
	EncodingFormat string `json:"encoding_format,omitempty"`
}

type response struct {
	Data []item `json:"data"`
}

type item struct {
	Index     int       `json:"index"`
	Embedding []float32 `json:"embedding"`
}

// Embed returns one vector per text, in order, in batches of BatchSize.
func (e *Embedder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	out := make([][]float32, 0, len(texts))
	for lo := 0; lo < len(texts); lo += e.cfg.BatchSize {
		part := texts[lo:min(lo+e.cfg.BatchSize, len(texts))]
		res, err := e.post(ctx, part)
		if err != nil {
			return nil, err
		}
		vecs := make([][]float32, len(res.Data))
		for i, d := range res.Data {
			vecs[i] = d.Embedding
		}
		if byIndex, ok := orderByIndex(res, len(part)); ok {
			vecs = byIndex
		}
		if err := e.remote.Check(vecs, len(part), e.cfg.Dimensions); err != nil {
			return nil, err
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// post asks for the embeddings of part, as base64 unless the server
// refused it once: then, and from then on, as numbers.
func (e *Embedder) post(ctx context.Context, part []string) (response, error) {
	req := request{Input: part, Model: e.cfg.Model, Dimensions: e.cfg.Dimensions}
	if !e.floats.Load() {
		req.EncodingFormat = "base64"
	}
	var res response
	err := e.remote.Post(ctx, "/embeddings", req, &res)
	if err != nil && req.EncodingFormat != "" && refusesBase64(err) {
		e.floats.Store(true)
		req.EncodingFormat = ""
		res = response{}
		err = e.remote.Post(ctx, "/embeddings", req, &res)
	}
	return res, err
}

// refusesBase64 reports whether err is the server rejecting the request
// for its encoding_format.
func refusesBase64(err error) bool {
	var pe *ragtime.Error
	return errors.As(err, &pe) && pe.Kind == ragtime.KindUpstreamRejected && strings.Contains(pe.Message, "encoding_format")
}

// DecodeBody reads an embeddings response whose vectors are base64
// strings (encoding_format "base64") without encoding/json's reflection,
// and any other through encoding/json: vectors as arrays of numbers, from
// a server that ignores encoding_format.
func (r *response) DecodeBody(body []byte) error {
	p := parsers.Get()
	defer parsers.Put(p)
	if handled, err := r.decodeBase64(p, body); handled {
		return err
	}
	*r = response{}
	return json.Unmarshal(body, r)
}

// parsers are reused across responses (a fastjson.Parser keeps its
// values' memory).
var parsers fastjson.ParserPool

// decodeBase64 reads body when it is an object whose data is an array of
// objects each with a string embedding (and an integer index, or none).
// handled is false for any other shape, which encoding/json then reads.
func (r *response) decodeBase64(p *fastjson.Parser, body []byte) (handled bool, err error) {
	v, err := p.ParseBytes(body)
	if err != nil || v.Type() != fastjson.TypeObject {
		return false, nil
	}
	data := v.Get("data")
	if data == nil || data.Type() != fastjson.TypeArray {
		return false, nil
	}
	items := data.GetArray()
	for _, it := range items {
		emb := it.Get("embedding")
		if it.Type() != fastjson.TypeObject || emb == nil || emb.Type() != fastjson.TypeString {
			return false, nil
		}
		if idx := it.Get("index"); idx != nil {
			if _, err := idx.Int(); err != nil {
				return false, nil
			}
		}
	}
	r.Data = make([]item, len(items))
	sp := scratches.Get().(*[]byte)
	scratch := *sp
	defer func() {
		if cap(scratch) <= 64<<10 {
			*sp = scratch[:0]
			scratches.Put(sp)
		}
	}()
	for i, it := range items {
		r.Data[i].Index = it.GetInt("index")
		if r.Data[i].Embedding, scratch, err = decodeFloat32s(it.Get("embedding").GetStringBytes(), scratch); err != nil {
			return true, fmt.Errorf("data[%d].embedding is not the base64 of little-endian float32s (encoding_format base64): %w", i, err)
		}
	}
	return true, nil
}

// scratches hold decodeFloat32s's bytes between responses (a vector's
// bytes are copied into its floats).
var scratches = sync.Pool{New: func() any { return new([]byte) }}

// decodeFloat32s decodes b64, the base64 (padded or not) of little-endian
// float32s; scratch is reused for the bytes and returned for the next call.
func decodeFloat32s(b64, scratch []byte) ([]float32, []byte, error) {
	b64 = bytes.TrimRight(b64, "=")
	n := base64.RawStdEncoding.DecodedLen(len(b64))
	if cap(scratch) < n {
		scratch = make([]byte, n)
	}
	raw := scratch[:n]
	m, err := base64.RawStdEncoding.Decode(raw, b64)
	if err != nil {
		return nil, scratch, err
	}
	if m%4 != 0 {
		return nil, scratch, fmt.Errorf("%d bytes, not a whole number of float32s", m)
	}
	out := make([]float32, m/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, scratch, nil
}

// orderByIndex places the vectors by their index field when every index is
// valid and unique (servers may answer out of order).
func orderByIndex(res response, n int) ([][]float32, bool) {
	if len(res.Data) != n {
		return nil, false
	}
	out := make([][]float32, n)
	for _, d := range res.Data {
		if d.Index < 0 || d.Index >= n || out[d.Index] != nil {
			return nil, false
		}
		out[d.Index] = d.Embedding
	}
	return out, true
}
