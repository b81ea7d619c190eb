package llm

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"ragtime/pipeline"
)

// TestMain fails the package when any test leaves a goroutine behind
// (a stream reader, a connection of the keep-alive pool, a server handler).
//
// goleak.VerifyTestMain waits about two seconds for goroutines to end; on a
// loaded 2-core machine a closing connection's goroutines can take longer to
// be scheduled, so this waits up to ten before calling it a leak.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(10 * time.Second)
		for err := goleak.Find(); err != nil; err = goleak.Find() {
			if time.Now().After(deadline) {
				fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Exit(code)
}

// generate calls g.Generate with req and returns the Generation it filled.
func generate(ctx context.Context, g pipeline.Generator, req pipeline.GenerateRequest, emit func(pipeline.Delta) error) (pipeline.Generation, error) {
	var gen pipeline.Generation
	err := g.Generate(ctx, &req, emit, &gen)
	return gen, err
}
