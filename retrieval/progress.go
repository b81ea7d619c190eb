package retrieval

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// ProgressBar returns a progress callback for Ingester.Ingest writing to w:
// an animated bar when w is a terminal (isTerminal, as the caller decides
// with isatty), else plain lines such as "ingested 12/40 files, 230 chunks"
// at every tenth of the files and at the end, which suits logs and CI.
func ProgressBar(w io.Writer, isTerminal bool) func(Progress) {
	if isTerminal {
		return terminalProgress(w)
	}
	lastStep := -1
	return func(p Progress) {
		if p.Done {
			fmt.Fprintf(w, "ingested %d/%d files: %d stored, %d unchanged, %d chunks\n",
				p.Files, p.TotalFiles, p.Documents, p.Skipped, p.Chunks)
			return
		}
		step := p.Files * 10 / max(p.TotalFiles, 1)
		if step == lastStep || p.Files == p.TotalFiles { // the summary follows
			return
		}
		lastStep = step
		fmt.Fprintf(w, "read %d/%d files, %d chunks stored so far\n", p.Files, p.TotalFiles, p.Chunks)
	}
}

// ProgressAfter returns report held back until after has passed since
// ProgressAfter was called (now reads the clock): an ingest quicker than that shows no
// progress at all, not even the final line, since the caller prints its own
// summary; a slower one shows progress from then on, and its end.
func ProgressAfter(report func(Progress), after time.Duration, now func() time.Time) func(Progress) {
	start := now()
	showing := false
	return func(p Progress) {
		if !showing && now().Sub(start) < after {
			return
		}
		showing = true
		report(p)
	}
}

func terminalProgress(w io.Writer) func(Progress) {
	var bar *progressbar.ProgressBar
	return func(p Progress) {
		if bar == nil {
			bar = progressbar.NewOptions(p.TotalFiles,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("ingesting"),
				progressbar.OptionShowCount(),
				progressbar.OptionSetItsString("files"),
				progressbar.OptionShowIts(),
				progressbar.OptionSetPredictTime(true),
				progressbar.OptionFullWidth(),
			)
		}
		bar.Describe(fmt.Sprintf("ingesting (%d chunks)", p.Chunks))
		_ = bar.Set(p.Files) // a progress display has nowhere to report errors
		if p.Done {
			_ = bar.Finish()
			fmt.Fprintf(w, "\ningested %d/%d files: %d stored, %d unchanged, %d chunks\n",
				p.Files, p.TotalFiles, p.Documents, p.Skipped, p.Chunks)
		}
	}
}
