package sim

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"ragtime/lexical"
	"ragtime/retrieval"
)

// maxEmbedInputs is OpenAI's bound on the inputs of one embeddings request.
const maxEmbedInputs = 2048

// maxRerankDocs bounds the documents of one rerank request.
const maxRerankDocs = 10000

// embedInput is OpenAI's "input": a string, an array of strings, an array of
// token ids or an array of arrays of token ids. Token ids are decoded with
// the simulator's tokenizer.
type embedInput struct {
	texts []string
	set   bool
}

func (in *embedInput) decode(b []byte, decodeIDs func([]int) string) error {
	in.set = true
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		in.texts = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err == nil {
		in.texts = many
		return nil
	}
	var ids []int
	if err := json.Unmarshal(b, &ids); err == nil {
		in.texts = []string{decodeIDs(ids)}
		return nil
	}
	var idss [][]int
	if err := json.Unmarshal(b, &idss); err == nil {
		for _, ids := range idss {
			in.texts = append(in.texts, decodeIDs(ids))
		}
		return nil
	}
	return errors.New("input must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
}

// embedRequest is the body of POST /v1/embeddings and of Ollama's POST
// /api/embed (which sends the same "model", "input" and "dimensions").
type embedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

// decodeBody reads a JSON body into v, with errors a client can act on.
func decodeBody(r io.Reader, v any) *requestError {
	if err := json.NewDecoder(r).Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var maxErr *http.MaxBytesError
		switch {
		case errors.As(err, &maxErr):
			return &requestError{Status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body exceeds %d bytes", maxErr.Limit)}
		case errors.As(err, &typeErr):
			return &requestError{Param: typeErr.Field, Message: fmt.Sprintf("invalid type for %q: expected %s", typeErr.Field, typeErr.Type)}
		case errors.Is(err, io.EOF):
			return &requestError{Message: "request body is empty; want a JSON object"}
		default:
			return &requestError{Message: "request body is not valid JSON: " + err.Error()}
		}
	}
	return nil
}

// embedDialect tells the OpenAI and Ollama embedding endpoints apart: the
// request is the same, the answer and the error bodies are not.
type embedDialect int

const (
	dialectOpenAI embedDialect = iota
	dialectOllama
)

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	s.serveEmbeddings(w, r, dialectOpenAI)
}

func (s *Server) handleOllamaEmbed(w http.ResponseWriter, r *http.Request) {
	s.serveEmbeddings(w, r, dialectOllama)
}

func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request, dialect embedDialect) {
	arrival := time.Now()
	s.embeds.Add(1)
	if !s.authorized(r) {
		s.rejected.Add(1)
		s.writeAuthError(w)
		return
	}
	req, in, dim, re := s.readEmbedRequest(w, r, dialect)
	if re != nil {
		s.failEmbed(w, dialect, re)
		return
	}
	fault, err := s.pickFault(r)
	if err != nil {
		s.failEmbed(w, dialect, &requestError{Param: "X-Llmsim-Fault", Message: err.Error()})
		return
	}
	if s.injectJSONFault(w, r, fault, dialect == dialectOllama) {
		return
	}
	emb, err := retrieval.NewHashEmbedder(dim)
	if err != nil { // dim was checked above
		s.failEmbed(w, dialect, &requestError{Status: http.StatusInternalServerError, Message: err.Error()})
		return
	}
	vecs, err := emb.Embed(r.Context(), in.texts)
	if err != nil {
		return // the client went away
	}
	tokens := 0
	for _, t := range in.texts {
		tokens += s.counter.Count(t)
	}
	cost := ms(s.cfg.EmbedMs + s.cfg.EmbedMsPerInput*float64(len(in.texts)))
	if !s.sleepModelled(r.Context(), arrival.Add(cost)) {
		return
	}
	writeEmbeddings(w, dialect, &req, vecs, tokens, arrival)
}

// failEmbed answers a rejected embedding request in the dialect's error
// body: Ollama's {"error": ...}, or OpenAI's naming the field.
func (s *Server) failEmbed(w http.ResponseWriter, dialect embedDialect, re *requestError) {
	status := cmp.Or(re.Status, http.StatusBadRequest)
	s.rejected.Add(1)
	if dialect == dialectOllama {
		writeJSON(w, status, map[string]string{"error": re.Message})
		return
	}
	code := "invalid_request"
	if status == http.StatusNotFound {
		code = "model_not_found"
	}
	s.reject(w, status, code, re.Param, re.Message)
}

// readEmbedRequest reads and checks an embedding request: its model, its
// texts, their encoding and the vectors' dimension (512 unless
// --embed-dimensions or the request says).
func (s *Server) readEmbedRequest(w http.ResponseWriter, r *http.Request, dialect embedDialect) (req embedRequest, in embedInput, dim int, re *requestError) {
	fail := func(status int, param, msg string) (embedRequest, embedInput, int, *requestError) {
		return req, in, 0, &requestError{Status: status, Param: param, Message: msg}
	}
	if re := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); re != nil {
		return fail(cmp.Or(re.Status, http.StatusBadRequest), re.Param, re.Message)
	}
	if req.Model == "" {
		return fail(http.StatusBadRequest, "model", "model is required (llmsim, a simulator, embeds with any model name unless --model names one)")
	}
	if s.cfg.Model != "" && req.Model != s.cfg.Model {
		return fail(http.StatusNotFound, "model", fmt.Sprintf("The model %q does not exist on llmsim (a simulator); it serves %q (--model).", req.Model, s.cfg.Model))
	}
	if len(req.Input) == 0 || string(req.Input) == "null" {
		return fail(http.StatusBadRequest, "input", "input is required: a string or an array of strings")
	}
	if err := in.decode(req.Input, s.counter.Decode); err != nil {
		return fail(http.StatusBadRequest, "input", err.Error())
	}
	switch {
	case len(in.texts) == 0:
		return fail(http.StatusBadRequest, "input", "input must not be an empty array")
	case len(in.texts) > maxEmbedInputs:
		return fail(http.StatusBadRequest, "input", fmt.Sprintf("input has %d texts; at most %d per request", len(in.texts), maxEmbedInputs))
	}
	if dialect == dialectOpenAI {
		for i, t := range in.texts {
			if t == "" {
				return fail(http.StatusBadRequest, "input", fmt.Sprintf("input[%d] is an empty string, which OpenAI's API rejects", i))
			}
		}
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		return fail(http.StatusBadRequest, "encoding_format", fmt.Sprintf("encoding_format must be float or base64, got %q", req.EncodingFormat))
	}
	dim = cmp.Or(s.cfg.EmbedDimensions, 512)
	if req.Dimensions != nil {
		dim = *req.Dimensions
		if dim < retrieval.MinHashDimension || dim > retrieval.MaxHashDimension {
			return fail(http.StatusBadRequest, "dimensions", fmt.Sprintf("dimensions must be between %d and %d, got %d", retrieval.MinHashDimension, retrieval.MaxHashDimension, dim))
		}
	}
	return req, in, dim, nil
}

// writeEmbeddings answers an embedding request with vecs, in Ollama's body
// or OpenAI's (base64 when the request asked).
func writeEmbeddings(w http.ResponseWriter, dialect embedDialect, req *embedRequest, vecs [][]float32, tokens int, arrival time.Time) {
	if dialect == dialectOllama {
		writeJSON(w, http.StatusOK, map[string]any{
			"model":             req.Model,
			"embeddings":        vecs,
			"total_duration":    time.Since(arrival).Nanoseconds(),
			"load_duration":     0,
			"prompt_eval_count": tokens,
		})
		return
	}
	data := make([]map[string]any, len(vecs))
	for i, v := range vecs {
		var e any = v
		if req.EncodingFormat == "base64" {
			e = float32Base64(v)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   data,
		"model":  req.Model,
		"usage":  map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// sleepModelled waits until an embedding's or a rerank's modelled latency
// has passed (false when ctx ended first) and records how late it woke:
// under load that lag, not the model, is the simulator's share of a
// client's wait beyond the modelled latency.
func (s *Server) sleepModelled(ctx context.Context, deadline time.Time) bool {
	if !s.alarm.sleepUntil(ctx, deadline) {
		return false
	}
	s.metrics.answerLag.observe(time.Since(deadline).Seconds())
	return true
}

// float32Base64 is OpenAI's encoding_format "base64": the little-endian
// float32 bytes of the vector, base64-encoded.
func float32Base64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// injectJSONFault answers r with fault, for the endpoints that answer one
// JSON body (embeddings, rerank), and reports whether it did. A stall holds
// the answer back --stall-ms and then lets it through; nochoices answers a
// body without its payload.
func (s *Server) injectJSONFault(w http.ResponseWriter, r *http.Request, fault string, ollama bool) bool {
	if fault == "" {
		return false
	}
	s.faultCount.Add(1)
	status := 0
	msg := ""
	switch fault {
	case FaultUnauthorized:
		if !ollama {
			s.rejected.Add(1)
			s.writeAuthError(w)
			return true
		}
		status, msg = http.StatusUnauthorized, "unauthorized (fault injected by llmsim, a simulator)"
	case FaultNotFound:
		status, msg = http.StatusNotFound, "model not found (fault injected by llmsim, a simulator)"
	case FaultRateLimited:
		status, msg = http.StatusTooManyRequests, "rate limit reached (fault injected by llmsim, a simulator); retry after the Retry-After header's seconds"
	case FaultServerError:
		status, msg = http.StatusInternalServerError, "the server had an error (fault injected by llmsim, a simulator)"
	case FaultStall:
		return !s.alarm.sleepUntil(r.Context(), time.Now().Add(ms(s.cfg.StallMs)))
	case FaultDrop:
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return true
	case FaultMalformed:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[{"embedding":[0.1,`))
		return true
	case FaultNoChoices:
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "model": "llmsim"})
		return true
	}
	if ollama {
		s.rejected.Add(1)
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(s.cfg.RetryAfterSeconds))
		}
		writeJSON(w, status, map[string]string{"error": msg})
		return true
	}
	code := map[int]string{404: "model_not_found", 429: "rate_limit_exceeded", 500: "internal_error"}[status]
	s.reject(w, status, code, "", msg)
	return true
}

// rerankRequest holds both request shapes: Hugging Face TEI's {query,
// texts} and Cohere's / Jina's {model, query, documents, top_n}.
type rerankRequest struct {
	Model           string          `json:"model"`
	Query           *string         `json:"query"`
	Texts           *[]string       `json:"texts"`
	Documents       json.RawMessage `json:"documents"`
	TopN            *int            `json:"top_n"`
	ReturnDocuments bool            `json:"return_documents"`
	RawScores       bool            `json:"raw_scores"`
	ReturnText      bool            `json:"return_text"`
}

// documents reads Cohere's "documents": strings, or objects with a "text".
func (r *rerankRequest) documents() ([]string, error) {
	var plain []string
	if err := json.Unmarshal(r.Documents, &plain); err == nil {
		return plain, nil
	}
	var objs []struct {
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(r.Documents, &objs); err != nil {
		return nil, errors.New("documents must be an array of strings or of objects with a text field")
	}
	out := make([]string, len(objs))
	for i, o := range objs {
		if o.Text == nil {
			return nil, fmt.Errorf("documents[%d] has no text field", i)
		}
		out[i] = *o.Text
	}
	return out, nil
}

// rerankScore is one document's BM25 score.
type rerankScore struct {
	index int
	bm25  float64
}

// relevance squashes a BM25 score (0 to unbounded) into [0, 1), keeping the
// order, where cross-encoders report a sigmoid.
func relevance(bm25 float64) float64 { return bm25 / (1 + bm25) }

// handleRerank serves both rerank shapes on /rerank, /v1/rerank and
// /v2/rerank: a body with "texts" gets TEI's answer, a body with "documents"
// gets Cohere's (which Jina shares).
func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	arrival := time.Now()
	s.reranks.Add(1)
	fail := func(status int, param, msg string) {
		s.reject(w, status, "invalid_request", param, msg)
	}
	if !s.authorized(r) {
		s.rejected.Add(1)
		s.writeAuthError(w)
		return
	}
	var req rerankRequest
	if re := decodeBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); re != nil {
		fail(cmp.Or(re.Status, http.StatusBadRequest), re.Param, re.Message)
		return
	}
	if req.Query == nil || *req.Query == "" {
		fail(http.StatusBadRequest, "query", "query is required and must not be empty")
		return
	}
	tei := req.Texts != nil
	var docs []string
	switch {
	case tei:
		docs = *req.Texts
	case len(req.Documents) > 0 && string(req.Documents) != "null":
		var err error
		if docs, err = req.documents(); err != nil {
			fail(http.StatusBadRequest, "documents", err.Error())
			return
		}
	default:
		fail(http.StatusBadRequest, "documents", `send "texts" (TEI's /rerank) or "documents" (Cohere's and Jina's /v1/rerank)`)
		return
	}
	param := map[bool]string{true: "texts", false: "documents"}[tei]
	switch {
	case len(docs) == 0:
		fail(http.StatusBadRequest, param, param+" must not be empty")
		return
	case len(docs) > maxRerankDocs:
		fail(http.StatusBadRequest, param, fmt.Sprintf("%s has %d entries; at most %d per request", param, len(docs), maxRerankDocs))
		return
	}
	topN := len(docs)
	if req.TopN != nil {
		if *req.TopN < 1 {
			fail(http.StatusBadRequest, "top_n", fmt.Sprintf("top_n must be ≥ 1, got %d", *req.TopN))
			return
		}
		topN = min(*req.TopN, len(docs))
	}
	fault, err := s.pickFault(r)
	if err != nil {
		fail(http.StatusBadRequest, "X-Llmsim-Fault", err.Error())
		return
	}
	if s.injectJSONFault(w, r, fault, false) {
		return
	}
	// the same scoring as ragtime's bm25 reranker: content words of the
	// query against all words of each document
	words := make([][]string, len(docs))
	for i, d := range docs {
		words[i] = lexical.Words(d)
	}
	raw := lexical.NewBM25().Score(lexical.ContentWords(*req.Query), words)
	scores := make([]rerankScore, len(docs))
	for i, v := range raw {
		scores[i] = rerankScore{index: i, bm25: v}
	}
	slices.SortStableFunc(scores, func(a, b rerankScore) int { return cmp.Compare(b.bm25, a.bm25) })
	if !s.sleepModelled(r.Context(), arrival.Add(ms(s.cfg.RerankMs+s.cfg.RerankMsPerDoc*float64(len(docs))))) {
		return
	}
	if tei {
		out := make([]map[string]any, len(scores))
		for i, sc := range scores {
			v := relevance(sc.bm25)
			if req.RawScores {
				v = sc.bm25
			}
			out[i] = map[string]any{"index": sc.index, "score": v}
			if req.ReturnText {
				out[i]["text"] = docs[sc.index]
			}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	results := make([]map[string]any, topN)
	for i, sc := range scores[:topN] {
		results[i] = map[string]any{"index": sc.index, "relevance_score": relevance(sc.bm25)}
		if req.ReturnDocuments {
			results[i]["document"] = map[string]string{"text": docs[sc.index]}
		}
	}
	tokens := s.counter.Count(*req.Query)
	for _, d := range docs {
		tokens += s.counter.Count(d)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id":      s.idPrefix + "rerank-" + strconv.FormatUint(s.nextID.Add(1), 10),
		"model":   s.modelName(req.Model),
		"results": results,
		"meta":    map[string]any{"billed_units": map[string]int{"search_units": 1}},
		"usage":   map[string]int{"total_tokens": tokens},
	})
}
