package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"time"

	"github.com/mattn/go-isatty"

	"ragtime/retrieval"
)

func runIngest(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "ingest", "ingest [flags] PATH...")
	var pc partsConfig
	pc.registerIndex(fs)
	chunkSize := fs.Int("chunk-size", retrieval.DefaultChunkSize, "chunk size in characters")
	chunkOverlap := fs.Int("chunk-overlap", retrieval.DefaultChunkOverlap, "characters shared by neighbouring chunks")
	batchSize := fs.Int("batch-size", retrieval.DefaultBatchSize, "chunks embedded per call")
	concurrency := fs.Int("concurrency", 2, "embedding calls in flight at once")
	workers := fs.Int("workers", runtime.GOMAXPROCS(0), "files read, extracted and split at once, ahead of the store, which stores them in the order found, in batches whose graph search uses every core (the index is the same for any number); default: GOMAXPROCS")
	cpuProfile := fs.String("cpuprofile", "", "`file` to write a CPU profile of the whole ingest to (read it with go tool pprof)")
	traceFile := fs.String("trace", "", "`file` to write an execution trace of the whole ingest to: which goroutines ran when, and what the others waited for (read it with go tool trace)")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return &usageError{msg: "ingest needs at least one PATH (a file or a folder)"}
	}
	if *concurrency < 1 {
		return &usageError{msg: fmt.Sprintf("--concurrency must be at least 1, got %d", *concurrency)}
	}
	if *workers < 1 {
		return &usageError{msg: fmt.Sprintf("--workers must be at least 1, got %d", *workers)}
	}
	// Every path must exist before anything is opened: a typo must not
	// create the index directory nor print a summary.
	for _, path := range fs.Args() {
		if _, err := os.Stat(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("ingest: %s does not exist (nothing was ingested)", path)
			}
			return fmt.Errorf("ingest: cannot read %s (nothing was ingested): %w", path, err)
		}
	}
	if *cpuProfile != "" {
		stop, err := startRecording("--cpuprofile", *cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if *traceFile != "" {
		stop, err := startRecording("--trace", *traceFile, trace.Start, trace.Stop)
		if err != nil {
			return err
		}
		defer stop()
	}
	emb, err := pc.buildEmbedder(ctx, env)
	if err != nil {
		return err
	}
	pc.logger = slog.New(slog.NewTextHandler(env.stderr, nil))
	p, err := pc.openStore(ctx, env, emb, true)
	if err != nil {
		return err
	}
	defer p.Close()
	in := retrieval.Ingester{Embedder: emb, Store: p.store, ChunkSize: *chunkSize, ChunkOverlap: *chunkOverlap,
		BatchSize: *batchSize, Concurrency: *concurrency, Workers: *workers}
	progress := retrieval.ProgressAfter(retrieval.ProgressBar(env.stderr, isTerminal(env.stderr)), progressDelay, time.Now)
	st, err := in.Ingest(ctx, fs.Args(), progress)
	if err != nil {
		reportFailed(env.stderr, st.Failed)
		return err
	}
	if c, ok := p.store.(compactor); ok {
		// Fold what was written into a snapshot and its graph, so the next
		// open loads them instead of linking every new chunk again.
		cst, did, cerr := c.CompactIfLogOver(ctx, retrieval.IngestCompactAfter)
		if cerr != nil {
			return cerr
		}
		if did {
			fmt.Fprintf(env.stderr, "compacted the index in %.2fs (generation %d)\n", cst.Took.Seconds(), cst.Generation)
		}
	}
	secs := max(st.Elapsed.Seconds(), 1e-9)
	where := p.store.Describe()
	fmt.Fprintf(env.stdout, "ingested %d documents (%d unchanged, skipped), %d chunks, in %.2fs: %.1f documents/s, %.1f chunks/s; %s\n",
		st.Documents, st.Skipped, st.Chunks, st.Elapsed.Seconds(), float64(st.Documents)/secs, float64(st.Chunks)/secs, where)
	if len(st.Failed) > 0 {
		reportFailed(env.stderr, st.Failed)
		return fmt.Errorf("ingest: %d of %d files were left out (listed above); the others are stored",
			len(st.Failed), len(st.Failed)+st.Documents+st.Skipped)
	}
	return nil
}

// startRecording writes what start records (a CPU profile, an execution
// trace) to path until the returned stop is called; flag names the flag
// that asked for it, in errors.
func startRecording(flag, path string, start func(io.Writer) error, stop func()) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return func() {
		stop()
		f.Close()
	}, nil
}

// reportFailed lists the files an ingest left out, one a line with its
// reason (each error names its file), after the run, so they are not lost
// among progress lines.
func reportFailed(w io.Writer, failed []retrieval.FileError) {
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(w, "%d files were left out:\n", len(failed))
	for _, f := range failed {
		fmt.Fprintf(w, "  %v\n", f.Err)
	}
}

// progressDelay is how long an ingest runs before it shows progress: a
// quick one prints only its summary.
const progressDelay = time.Second

// compactor is a store that keeps a log to fold in after a bulk write (the
// embedded index; see docs/index.md).
type compactor interface {
	CompactIfLogOver(ctx context.Context, n int64) (retrieval.CompactStats, bool, error)
}

// isTerminal reports whether w is a terminal (for the progress bar).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
