package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"

	"ragtime"
	"ragtime/api"
	"ragtime/eval"
	"ragtime/pipeline"
	"ragtime/sweep"
)

// evalConfig holds eval's flags.
type evalConfig struct {
	qrels      string
	url        string
	keyEnv     string
	retrieval  listFlag
	rerank     listFlag
	vectorK    listFlag
	lexicalK   listFlag
	collapse   listFlag
	topK       int
	rerankTopN int
	runs       int
	json       bool
	checkIDs   bool
}

func (c *evalConfig) register(fs *flag.FlagSet) {
	c.retrieval = listFlag{ragtime.RetrievalVector, ragtime.RetrievalLexical, ragtime.RetrievalHybrid}
	c.rerank = listFlag{"off"}
	fs.StringVar(&c.qrels, "qrels", "", "labelled questions: JSONL {\"question\", \"relevant\": [doc_id, ...], \"relevant_chunks\": [chunk_id, ...]} or TSV question<TAB>doc_ids[<TAB>chunk_ids] (required)")
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "URL of the running ragtime serve whose POST /v1/search is measured")
	fs.StringVar(&c.keyEnv, "api-key-env", "RAGTIME_API_KEY", "NAME of the environment variable holding an API key (scope ask; scope documents too for the id check), for a server that requires keys")
	fs.Var(&c.retrieval, "retrieval", "comma-separated retrieval modes to measure: vector, lexical, hybrid, or default (the server's)")
	fs.Var(&c.rerank, "rerank", "comma-separated: off, on (measure each mode without and with the reranker)")
	fs.Var(&c.vectorK, "vector-k", "comma-separated candidate depths of the vector leg (default: the server's)")
	fs.Var(&c.lexicalK, "lexical-k", "comma-separated candidate depths of the lexical leg (default: the server's)")
	fs.Var(&c.collapse, "collapse", "comma-separated collapse modes to measure: doc (one chunk per document), none (chunks as ranked), or default (the server's; the default)")
	fs.IntVar(&c.topK, "top-k", 10, fmt.Sprintf("results per search (1-%d); the figures are @1, @5 and @10 of these", pipeline.MaxTopK))
	fs.IntVar(&c.rerankTopN, "rerank-top-n", 0, "with --rerank on: results kept after reranking (0: the server's default)")
	fs.IntVar(&c.runs, "runs", 1, "times each question is searched per configuration (more runs, steadier latency figures)")
	fs.BoolVar(&c.json, "json", false, "print the report as JSON instead of a table")
	fs.BoolVar(&c.checkIDs, "check-ids", true, "before measuring, check that every relevant doc id is in the server's index (GET /v1/documents)")
}

// configs expands the lists into the configurations, each once: a vector
// search has no lexical depth and a lexical one no vector depth.
func (c *evalConfig) configs() ([]eval.Config, error) {
	vks, err := intList("--vector-k", c.vectorK, 1, 10_000)
	if err != nil {
		return nil, err
	}
	lks, err := intList("--lexical-k", c.lexicalK, 1, 10_000)
	if err != nil {
		return nil, err
	}
	if len(vks) == 0 {
		vks = []int{0}
	}
	if len(lks) == 0 {
		lks = []int{0}
	}
	if len(c.retrieval) == 0 || len(c.rerank) == 0 {
		return nil, &usageError{msg: "--retrieval and --rerank need at least one value"}
	}
	collapses := []string{""}
	if len(c.collapse) > 0 {
		collapses = collapses[:0]
	}
	for _, cm := range c.collapse {
		switch cm {
		case pipeline.CollapseDoc, pipeline.CollapseNone:
			collapses = append(collapses, cm)
		case "default":
			collapses = append(collapses, "")
		default:
			return nil, &usageError{msg: fmt.Sprintf("--collapse: %q is not doc, none or default", cm)}
		}
	}
	var out []eval.Config
	seen := map[eval.Config]bool{}
	for _, cm := range collapses {
		for _, mode := range c.retrieval {
			switch mode {
			case ragtime.RetrievalVector, ragtime.RetrievalLexical, ragtime.RetrievalHybrid:
			case "default":
				mode = ""
			default:
				return nil, &usageError{msg: fmt.Sprintf("--retrieval: %q is not vector, lexical, hybrid or default", mode)}
			}
			for _, rr := range c.rerank {
				var rerank bool
				switch rr {
				case "on", "true":
					rerank = true
				case "off", "false":
				default:
					return nil, &usageError{msg: fmt.Sprintf("--rerank: %q is not off or on", rr)}
				}
				for _, vk := range vks {
					for _, lk := range lks {
						cfg := eval.Config{Retrieval: mode, TopK: c.topK, VectorK: vk, LexicalK: lk, Collapse: cm, Rerank: rerank}
						if rerank {
							cfg.RerankTopN = c.rerankTopN
						}
						if mode == ragtime.RetrievalVector {
							cfg.LexicalK = 0
						}
						if mode == ragtime.RetrievalLexical {
							cfg.VectorK = 0
						}
						if !seen[cfg] {
							seen[cfg] = true
							out = append(out, cfg)
						}
					}
				}
			}
		}
	}
	return out, nil
}

func runEval(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "eval", "eval --qrels FILE [--url URL] [--retrieval vector,lexical,hybrid] [--rerank off,on] [--json]")
	var cfg evalConfig
	cfg.register(fs)
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("eval takes no arguments, got %q (questions go in --qrels)", fs.Arg(0))}
	}
	switch {
	case cfg.qrels == "":
		fs.Usage()
		return &usageError{msg: "--qrels is required: a JSONL or TSV file of questions with their relevant doc ids (see docs/tuning.md)"}
	case pipeline.CheckTopK("--top-k", cfg.topK) != nil:
		return &usageError{msg: pipeline.CheckTopK("--top-k", cfg.topK).Error()}
	case cfg.rerankTopN < 0 || cfg.rerankTopN > cfg.topK:
		return &usageError{msg: fmt.Sprintf("--rerank-top-n must be between 0 (the server's default) and --top-k %d, got %d", cfg.topK, cfg.rerankTopN)}
	case cfg.runs < 1:
		return &usageError{msg: fmt.Sprintf("--runs must be 1 or more, got %d", cfg.runs)}
	}
	if u, err := url.Parse(cfg.url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &usageError{msg: fmt.Sprintf("--url must be an http(s) URL such as http://127.0.0.1:8080, got %q", cfg.url)}
	}
	configs, err := cfg.configs()
	if err != nil {
		return err
	}
	questions, err := eval.Load(cfg.qrels)
	if err != nil {
		return err
	}
	for _, q := range questions {
		if !q.Labelled() {
			return fmt.Errorf("%s:%d: the question has no \"relevant\" doc ids (or \"relevant_chunks\"); eval needs every question labelled", cfg.qrels, q.Line)
		}
	}
	searcher := eval.HTTPSearcher{Client: &api.Client{BaseURL: cfg.url, HTTP: &http.Client{}, APIKey: env.getenv(cfg.keyEnv),
		OnWait: admissionNote(env.stderr)}}
	if cfg.checkIDs {
		known, err := searcher.DocIDs(ctx)
		if err != nil {
			var pe *ragtime.Error
			if errors.As(err, &pe) && (pe.Status == http.StatusUnauthorized || pe.Status == http.StatusForbidden) {
				return fmt.Errorf("%w (the id check needs a key with scope documents in $%s; or skip it with --check-ids=false)", err, cfg.keyEnv)
			}
			return err
		}
		if err := eval.CheckIDs(questions, known); err != nil {
			return fmt.Errorf("%s: %w (the server at %s holds %d documents; ingest the corpus the labels were made for)", cfg.qrels, err, cfg.url, len(known))
		}
	}
	if !cfg.json {
		fmt.Fprintf(env.stdout, "eval: %d questions, %d configurations, %d runs against %s\n", len(questions), len(configs), cfg.runs, cfg.url)
	}
	rep, runErr := eval.Run(ctx, eval.Options{Questions: questions, Configs: configs, Runs: cfg.runs, Searcher: searcher,
		Progress: sweep.ProgressBar(env.stderr, isTerminal(env.stderr))})
	if rep == nil {
		return runErr
	}
	if cfg.json {
		err = rep.WriteJSON(env.stdout)
	} else {
		fmt.Fprintln(env.stdout)
		err = rep.WriteTable(env.stdout)
	}
	return errors.Join(runErr, err)
}
