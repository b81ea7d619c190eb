package retrieval

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"ragtime"
)

// What a serving process asks of a vector store beyond searching and
// writing; qdrant.Store answers the same, so cmd/ragtime need not branch on
// which store it opened.

// Ready reports whether the index can be searched: an open index always can.
func (ix *Index) Ready(context.Context) error { return nil }

// ListDocuments lists the stored documents (Documents, with the signature
// of a store that asks a server).
func (ix *Index) ListDocuments(context.Context) ([]ragtime.DocumentInfo, error) {
	return ix.Documents(), nil
}

// SearchAttrs are the search stage's extra attributes: whether the search
// is exact, and its ef when it is not.
func (ix *Index) SearchAttrs() map[string]any {
	attrs := map[string]any{"exact": ix.Exact()}
	if !ix.Exact() {
		attrs["ef"] = ix.Ef()
	}
	return attrs
}

// SearchesInProcess reports that a search of the index waits on nothing
// outside the process (pipeline.InProcessSearcher): the stage events held
// before it need not be flushed first.
func (ix *Index) SearchesInProcess() bool { return true }

// Describe says where the index is and what it holds, for a CLI's summary.
func (ix *Index) Describe() string {
	size := "size unknown"
	if n, err := ix.DiskSize(); err == nil {
		size = fmt.Sprintf("%.1f MiB on disk", float64(n)/(1<<20))
	}
	return fmt.Sprintf("index at %s holds %d chunks (%s)", filepath.Dir(filepath.Dir(ix.Path())), ix.Len(), size)
}

// Watch reloads the index every interval when another process saved a
// newer one (an index opened read-only beside a writer); every ≤ 0 watches
// nothing. The returned func stops the watch and waits for it.
func (ix *Index) Watch(ctx context.Context, every time.Duration, log *slog.Logger) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				changed, err := ix.Reload()
				if err != nil {
					log.Warn("reloading the index", "err", err)
				} else if changed {
					log.Info("index reloaded", "chunks", ix.Len())
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
