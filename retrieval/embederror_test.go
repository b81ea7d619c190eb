package retrieval

import (
	"context"
	"errors"
	"strings"
	"testing"

	"ragtime"
)

// TestEmbedFailureHidesURLCredentials: the message goes to the SSE error
// event, the query row and the logs, so a password in --embed-base-url must
// not appear in it.
func TestEmbedFailureHidesURLCredentials(t *testing.T) {
	t.Parallel()
	r := &RemoteEmbedder{Provider: "openai", BaseURL: "http://user:s3cret-pass@127.0.0.1:9/v1", Model: "m",
		KeyVar: "RAGTIME_EMBED_API_KEY", Key: "sk-key"}
	for _, status := range []int{0, 401, 404, 429, 504, 500, 400} {
		err := r.failure(context.Background(), status, []byte(`{"error": {"message": "nope"}}`), errors.New("connection refused"))
		var pe *ragtime.Error
		if !errors.As(err, &pe) {
			t.Fatalf("status %d: %v is not a *ragtime.Error", status, err)
		}
		if strings.Contains(pe.Message, "s3cret-pass") || strings.Contains(pe.Error(), "s3cret-pass") {
			t.Errorf("status %d: the URL's password reached the message: %s", status, pe.Message)
		}
		if !strings.Contains(pe.Message, "127.0.0.1:9") {
			t.Errorf("status %d: the message no longer names the endpoint: %s", status, pe.Message)
		}
	}
}
