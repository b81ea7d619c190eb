package main

import (
	"context"
	"fmt"
	"os"

	"github.com/mattn/go-isatty"

	"ragtime/retrieval"
)

func runIngest(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "ingest", "ingest [flags] PATH...")
	var pc partsConfig
	pc.registerIndex(fs)
	chunkSize := fs.Int("chunk-size", 1000, "chunk size in characters")
	chunkOverlap := fs.Int("chunk-overlap", 100, "characters shared by neighbouring chunks")
	batchSize := fs.Int("batch-size", 64, "chunks embedded per call")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return &usageError{msg: "ingest needs at least one PATH (a file or a folder)"}
	}
	emb, err := pc.buildEmbedder()
	if err != nil {
		return err
	}
	ix, err := pc.openIndex(emb, true)
	if err != nil {
		return err
	}
	defer ix.Close()
	in := retrieval.Ingester{Embedder: emb, Index: ix, ChunkSize: *chunkSize, ChunkOverlap: *chunkOverlap, BatchSize: *batchSize}
	progress := retrieval.ProgressBar(env.stderr, isTerminal(env.stderr))
	st, err := in.Ingest(ctx, fs.Args(), progress)
	fmt.Fprintf(env.stdout, "ingested %d documents (%d unchanged, skipped), %d chunks, in %.2fs; index at %s holds %d chunks\n",
		st.Documents, st.Skipped, st.Chunks, st.Elapsed.Seconds(), pc.dataDir, ix.Len())
	return err
}

// isTerminal reports whether w is a terminal (for the progress bar).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
