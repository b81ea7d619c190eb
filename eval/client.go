package eval

import (
	"context"
	"fmt"

	"ragtime/api"
)

// HTTPSearcher searches through a running ragtime's POST /v1/search, with
// its API key and its admission control (a refusal with Retry-After is
// waited out and asked again, as api.Client does for /ask).
type HTTPSearcher struct {
	Client *api.Client
}

// Search sends req and decodes the answer.
func (h HTTPSearcher) Search(ctx context.Context, req Request) (Response, error) {
	var resp Response
	err := h.Client.PostJSON(ctx, "/v1/search", req, &resp)
	return resp, err
}

// DocIDs lists the ids of the documents in the server's index (GET
// /v1/documents, which needs a key with scope documents).
func (h HTTPSearcher) DocIDs(ctx context.Context) (map[string]bool, error) {
	var list struct {
		Documents []struct {
			DocID string `json:"doc_id"`
		} `json:"documents"`
	}
	if err := h.Client.GetJSON(ctx, "/v1/documents", &list); err != nil {
		return nil, fmt.Errorf("listing the server's documents: %w", err)
	}
	ids := make(map[string]bool, len(list.Documents))
	for _, d := range list.Documents {
		ids[d.DocID] = true
	}
	return ids, nil
}
