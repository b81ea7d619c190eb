package api

import (
	"fmt"
	"strings"
	"testing"

	"ragtime/pipeline"
)

// TestPagesCarryTheServersTopKLimit: the ask and queries pages' top_k
// inputs (and the ask page's script, which reads them) get the limit the
// server checks, filled in when the page is served.
func TestPagesCarryTheServersTopKLimit(t *testing.T) {
	t.Parallel()
	ts := newTestServer(t, Deps{Asker: &scriptedAsker{}})
	want := fmt.Sprintf(`name="top_k" type="number" min="1" max="%d"`, pipeline.MaxTopK)
	for _, path := range []string{"/", "/queries"} {
		status, body, _ := get(t, ts.URL+path)
		if status != 200 || !strings.Contains(body, want) || strings.Contains(body, "{{") {
			t.Errorf("GET %s: %d, want its top_k input with max %d and no placeholder left:\n%s", path, status, pipeline.MaxTopK, body)
		}
	}
}
