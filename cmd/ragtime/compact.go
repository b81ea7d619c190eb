package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"ragtime/retrieval"
)

// runCompact folds the embedded index's log into a new snapshot and drops
// the chunks of replaced and deleted documents (see docs/index.md). A
// writing `ragtime serve` or `ragtime ingest` compacts on its own in the
// background; this is for an index at rest, e.g. after a large ingest or
// before copying the data dir.
func runCompact(ctx context.Context, env *environment, args []string) error {
	fs := newFlagSet(env, "compact", "compact [flags]")
	dataDir := fs.String("data-dir", "./data", "directory holding the embedded vector index")
	exact := fs.Bool("store-exact", false, "the index is searched exactly (serve --store-exact): write no HNSW graph file")
	graphMB := fs.Int("index-graph-mb", retrieval.DefaultGraphFromMB, "megabytes of vectors from which the index has an HNSW graph, as serve's --index-graph-mb: a smaller index is written without one (0: always one)")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return &usageError{msg: fmt.Sprintf("compact takes no arguments, got %q", fs.Args())}
	}
	if *graphMB < 0 {
		return &usageError{msg: fmt.Sprintf("--index-graph-mb must not be negative, got %d", *graphMB)}
	}
	name, dim, err := retrieval.StoredEmbedder(*dataDir)
	if err != nil {
		return fmt.Errorf("compacting: %w", err)
	}
	ix, err := retrieval.OpenIndex(*dataDir, retrieval.IndexOptions{
		Dimension: dim, Embedder: name, Writable: true, Exact: *exact, CompactAfter: -1, GraphFrom: int64(*graphMB) << 20,
		Logger: slog.New(slog.NewTextHandler(env.stderr, nil)),
	})
	if errors.Is(err, retrieval.ErrLocked) {
		return fmt.Errorf("compacting the index under --data-dir %s: %w\n"+
			"a running `ragtime serve` or `ragtime ingest` writes to it and compacts it in the background on its own", *dataDir, err)
	}
	if err != nil {
		return fmt.Errorf("compacting the index under --data-dir %s: %w", *dataDir, err)
	}
	st, err := ix.Compact(ctx)
	if cerr := ix.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	fmt.Fprintf(env.stdout, "compacted the index at %s to generation %d in %.2fs: %d documents, %d chunks; reclaimed %d deleted chunks, folded in %.1f MiB of log; %.1f MiB → %.1f MiB on disk\n",
		*dataDir, st.Generation, st.Took.Seconds(), st.Documents, st.Chunks, st.Reclaimed, mib(st.LogBytes), mib(st.BytesBefore), mib(st.BytesAfter))
	return nil
}
