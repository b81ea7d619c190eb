package sweep

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// ProgressBar returns a Config.Progress that draws a bar with an ETA on w
// when tty is true, and otherwise prints a plain line at every tenth of the
// sweep (and at its end), such as "measured 30/120 queries, 12s, ETA 36s",
// once the sweep has run for a second: a sweep over in less prints none.
// It is safe for concurrent use.
func ProgressBar(w io.Writer, tty bool) func(done, total int) {
	return progressBar(w, tty, time.Now)
}

// quietFor is how long a plain-line progress stays silent.
const quietFor = time.Second

func progressBar(w io.Writer, tty bool, now func() time.Time) func(done, total int) {
	var mu sync.Mutex
	if tty {
		var bar *progressbar.ProgressBar
		return func(done, total int) {
			mu.Lock()
			defer mu.Unlock()
			if bar == nil {
				bar = progressbar.NewOptions(total,
					progressbar.OptionSetWriter(w),
					progressbar.OptionSetDescription("sweeping"),
					progressbar.OptionShowCount(),
					progressbar.OptionSetItsString("queries"),
					progressbar.OptionShowIts(),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionFullWidth(),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
				)
			}
			_ = bar.Set(done) // a progress display has nowhere to report errors
		}
	}
	start := now()
	lastTenth := 0
	return func(done, total int) {
		mu.Lock()
		defer mu.Unlock()
		tenth := done * 10 / max(total, 1)
		if tenth == lastTenth && done != total {
			return
		}
		lastTenth = tenth
		el := now().Sub(start)
		if el < quietFor {
			return
		}
		eta := time.Duration(float64(el) / float64(done) * float64(total-done))
		fmt.Fprintf(w, "measured %d/%d queries, %s, ETA %s\n", done, total, el.Round(time.Second), eta.Round(time.Second))
	}
}
