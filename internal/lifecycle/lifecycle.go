// Package lifecycle starts a process's parts in a listed order and stops
// them in the reverse of it, each step named, so the order a service shuts
// down in is read from one list rather than worked out from defers.
package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// ErrSkipped is what a Start returns when its part is not configured (no
// profiler address, no Redis): Open goes on, and Close neither stops nor
// logs the step.
var ErrSkipped = errors.New("lifecycle: step skipped")

// Step is one part of a process: Start opens it (nil: nothing to open),
// Stop closes what Start opened (nil: nothing to close). A Stop runs only
// when its Start returned nil.
type Step struct {
	Name  string
	Start func(ctx context.Context) error
	Stop  func()
}

// Steps runs a list of steps: Open starts them in order, Close stops the
// started ones from the last to the first. A Steps is used by one
// goroutine.
type Steps struct {
	list    []Step
	started int
	skipped []bool
	// Logger, when set, gets one line per step stopped (its name and how
	// long it took), so a slow shutdown names the step it waits on.
	Logger *slog.Logger
}

// New returns the steps of list, none started.
func New(list ...Step) *Steps { return &Steps{list: list, skipped: make([]bool, len(list))} }

// Open starts the steps in order. When one fails, the ones started before
// it are stopped (unlogged: nothing was served) and its error returned.
func (s *Steps) Open(ctx context.Context) error {
	for s.started < len(s.list) {
		st := s.list[s.started]
		if st.Start != nil {
			err := st.Start(ctx)
			if s.skipped[s.started] = errors.Is(err, ErrSkipped); s.skipped[s.started] {
				err = nil
			}
			if err != nil {
				log := s.Logger
				s.Logger = nil
				s.Close()
				s.Logger = log
				return err
			}
		}
		s.started++
	}
	return nil
}

// Close stops the started steps, the last started first. A second Close
// does nothing.
func (s *Steps) Close() {
	for s.started > 0 {
		s.started--
		st := s.list[s.started]
		if st.Stop == nil || s.skipped[s.started] {
			continue
		}
		start := time.Now()
		st.Stop()
		if s.Logger != nil {
			s.Logger.Info("shutdown: stopped "+st.Name, "step", st.Name,
				"ms", float64(time.Since(start).Round(time.Microsecond))/1e6)
		}
	}
}

// Names lists the steps in the order Open starts them.
func (s *Steps) Names() []string {
	names := make([]string, len(s.list))
	for i, st := range s.list {
		names[i] = st.Name
	}
	return names
}
