package eval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is one configuration to measure: what each question's search
// request carries besides the question. Zero fields are left to the
// server's defaults.
type Config struct {
	// Retrieval is ragtime.RetrievalHybrid, RetrievalVector or
	// RetrievalLexical; empty is the server's default.
	Retrieval string `json:"retrieval,omitempty"`
	TopK      int    `json:"top_k"`
	VectorK   int    `json:"vector_k,omitempty"`
	LexicalK  int    `json:"lexical_k,omitempty"`
	// Collapse is pipeline.CollapseDoc or CollapseNone; empty is the
	// server's default.
	Collapse   string `json:"collapse,omitempty"`
	Rerank     bool   `json:"rerank"`
	RerankTopN int    `json:"rerank_top_n,omitempty"`
}

// String names the configuration in tables: the mode, then the depths and
// reranking that were set.
func (c Config) String() string {
	parts := []string{cmpOr(c.Retrieval, "default")}
	if c.VectorK > 0 {
		parts = append(parts, "vk="+strconv.Itoa(c.VectorK))
	}
	if c.LexicalK > 0 {
		parts = append(parts, "lk="+strconv.Itoa(c.LexicalK))
	}
	if c.Collapse != "" {
		parts = append(parts, "collapse="+c.Collapse)
	}
	if c.Rerank {
		r := "+rerank"
		if c.RerankTopN > 0 {
			r += "=" + strconv.Itoa(c.RerankTopN)
		}
		parts = append(parts, r)
	}
	return strings.Join(parts, " ")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Request is the body of POST /v1/search as eval sends it.
type Request struct {
	Query      string `json:"query"`
	TopK       int    `json:"top_k,omitempty"`
	Retrieval  string `json:"retrieval,omitempty"`
	VectorK    int    `json:"vector_k,omitempty"`
	LexicalK   int    `json:"lexical_k,omitempty"`
	Collapse   string `json:"collapse,omitempty"`
	Rerank     bool   `json:"rerank"`
	RerankTopN int    `json:"rerank_top_n,omitempty"`
}

// Response is the part of POST /v1/search's answer that eval reads.
type Response struct {
	QueryID     string   `json:"query_id"`
	Retrieval   string   `json:"retrieval"`
	Results     []Result `json:"results"`
	RetrievalMs float64  `json:"retrieval_ms"`
}

// Result is one ranked chunk of a search answer.
type Result struct {
	Rank    int     `json:"rank"`
	ChunkID string  `json:"chunk_id"`
	DocID   string  `json:"doc_id"`
	Score   float64 `json:"score"`
}

// Searcher runs one retrieval-only search (POST /v1/search of a running
// ragtime, or anything answering the same way).
type Searcher interface {
	Search(ctx context.Context, req Request) (Response, error)
}

// Options is what Run measures.
type Options struct {
	// Questions must all carry relevance labels.
	Questions []Question
	Configs   []Config
	// Runs is how often each (question, configuration) is searched; the
	// quality figures come from the first answer (they do not change
	// between runs of a fixed index), the latency figures from all.
	Runs     int
	Searcher Searcher
	// Progress, when set, is called after each search with the count done
	// and the total.
	Progress func(done, total int)
}

// Summary is the figures of one configuration.
type Summary struct {
	Config Config `json:"config"`
	Name   string `json:"name"`
	// Questions is how many questions were judged (answered at least
	// once); Errors how many searches failed.
	Questions int `json:"questions"`
	Errors    int `json:"errors"`
	// Means over the judged questions.
	Hit1   float64 `json:"hit_at_1"`
	Hit5   float64 `json:"hit_at_5"`
	Hit10  float64 `json:"hit_at_10"`
	MRR10  float64 `json:"mrr_at_10"`
	NDCG10 float64 `json:"ndcg_at_10"`
	// RetrievalP50Ms and RetrievalP95Ms are the server's retrieval_ms over
	// every successful search of the configuration.
	RetrievalP50Ms float64 `json:"retrieval_p50_ms"`
	RetrievalP95Ms float64 `json:"retrieval_p95_ms"`
	// Lost is how many questions the first configuration finds in its top
	// 10 and this one does not (0 for the first).
	Lost int `json:"lost_vs_first"`
	// Missed are the lines of the questions with no relevant result in the
	// top 10.
	Missed []int `json:"missed_lines"`
}

// Report is the outcome of a Run.
type Report struct {
	StartedAt time.Time `json:"started_at"`
	Questions int       `json:"questions"`
	Runs      int       `json:"runs"`
	Summaries []Summary `json:"configurations"`
}

// Run searches every question at every configuration Runs times, in
// question-major order with the configurations interleaved, so that drift
// over the run (a warming page cache, a noisy neighbour) spreads over all
// configurations instead of landing on one. A first search per
// configuration warms the server and is not counted. A failed search is
// counted in Errors and the run goes on; an error ending ctx stops it and
// returns what was measured with ctx's error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.Questions) == 0 || len(o.Configs) == 0 {
		return nil, errors.New("eval: no questions or no configurations")
	}
	for _, q := range o.Questions {
		if !q.Labelled() {
			return nil, fmt.Errorf("eval: the question on line %d has no relevant doc or chunk ids", q.Line)
		}
	}
	runs := max(o.Runs, 1)
	rep := &Report{StartedAt: time.Now().UTC(), Questions: len(o.Questions), Runs: runs}
	type acc struct {
		sum         Summary
		lat         []float64
		hits10      map[int]bool
		h1, h5, h10 float64
		mrr, ndcg   float64
	}
	accs := make([]acc, len(o.Configs))
	for i, c := range o.Configs {
		accs[i] = acc{sum: Summary{Config: c, Name: c.String()}, hits10: map[int]bool{}}
		if _, err := o.Searcher.Search(ctx, request(o.Questions[0], c)); err != nil {
			return nil, fmt.Errorf("eval: warming up %s: %w", c, err)
		}
	}
	total, done := len(o.Questions)*len(o.Configs)*runs, 0
	var runErr error
loop:
	for _, q := range o.Questions {
		for ci, c := range o.Configs {
			a := &accs[ci]
			judged := false
			for range runs {
				if err := ctx.Err(); err != nil {
					runErr = err
					break loop
				}
				resp, err := o.Searcher.Search(ctx, request(q, c))
				done++
				if o.Progress != nil {
					o.Progress(done, total)
				}
				if err != nil {
					if ctx.Err() != nil {
						runErr = ctx.Err()
						break loop
					}
					a.sum.Errors++
					continue
				}
				a.lat = append(a.lat, resp.RetrievalMs)
				if judged {
					continue
				}
				judged = true
				ranked, relevant := Ranked(q, resp.Results)
				a.sum.Questions++
				a.h1 += HitAt(ranked, relevant, 1)
				a.h5 += HitAt(ranked, relevant, 5)
				hit := HitAt(ranked, relevant, 10)
				a.h10 += hit
				a.mrr += ReciprocalRankAt(ranked, relevant, 10)
				a.ndcg += NDCGAt(ranked, relevant, 10)
				if hit > 0 {
					a.hits10[q.Line] = true
				} else {
					a.sum.Missed = append(a.sum.Missed, q.Line)
				}
			}
		}
	}
	for i := range accs {
		a := &accs[i]
		if n := float64(a.sum.Questions); n > 0 {
			a.sum.Hit1, a.sum.Hit5, a.sum.Hit10 = round(a.h1/n, 4), round(a.h5/n, 4), round(a.h10/n, 4)
			a.sum.MRR10, a.sum.NDCG10 = round(a.mrr/n, 4), round(a.ndcg/n, 4)
		}
		if len(a.lat) > 0 {
			slices.Sort(a.lat)
			a.sum.RetrievalP50Ms = round(Percentile(a.lat, 0.5), 3)
			a.sum.RetrievalP95Ms = round(Percentile(a.lat, 0.95), 3)
		}
		for line := range accs[0].hits10 {
			if !a.hits10[line] {
				a.sum.Lost++
			}
		}
		rep.Summaries = append(rep.Summaries, a.sum)
	}
	return rep, runErr
}

func request(q Question, c Config) Request {
	return Request{Query: q.Text, TopK: c.TopK, Retrieval: c.Retrieval, VectorK: c.VectorK, LexicalK: c.LexicalK,
		Collapse: c.Collapse, Rerank: c.Rerank, RerankTopN: c.RerankTopN}
}
