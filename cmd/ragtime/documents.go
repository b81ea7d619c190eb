package main

import (
	"context"
	"fmt"

	"ragtime/api"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

var errReadOnly = fmt.Errorf("%w: serve runs with --read-only, or another process (an ingest, another serve) held the index's writer lock when it started", api.ErrReadOnly)

// documentStore serves /v1/documents from the configured vector store: the
// Ingester chunks and embeds, the store keeps, lists and deletes.
type documentStore struct {
	in       *retrieval.Ingester
	store    store
	list     func(ctx context.Context) ([]pipeline.DocumentInfo, error)
	readOnly bool
}

func newDocumentStore(p *parts, readOnly bool, chunkSize, chunkOverlap int) *documentStore {
	d := &documentStore{
		in: &retrieval.Ingester{Embedder: p.embedder, Store: p.store, ChunkSize: chunkSize, ChunkOverlap: chunkOverlap,
			BatchSize: retrieval.DefaultBatchSize, Concurrency: 2},
		store:    p.store,
		readOnly: readOnly,
	}
	switch {
	case p.index != nil:
		d.list = func(context.Context) ([]pipeline.DocumentInfo, error) { return p.index.Documents(), nil }
	case p.qdrant != nil:
		d.list = p.qdrant.Documents
	}
	return d
}

func (d *documentStore) PutDocument(ctx context.Context, in api.DocumentInput) (api.DocumentResult, error) {
	if d.readOnly {
		return api.DocumentResult{}, errReadOnly
	}
	res, err := d.in.IngestContent(ctx, retrieval.Content{
		DocID: in.ID, Kind: in.Kind, Title: in.Title, Body: in.Body, Metadata: in.Metadata, Source: "api",
	})
	if err != nil {
		return api.DocumentResult{}, err
	}
	return api.DocumentResult{DocID: res.DocID, Title: res.Title, Chunks: res.Chunks, Unchanged: res.Unchanged}, nil
}

func (d *documentStore) DeleteDocument(ctx context.Context, id string) (bool, error) {
	if d.readOnly {
		return false, errReadOnly
	}
	ok, err := d.store.DeleteDocument(ctx, id)
	if err != nil || !ok {
		return ok, err
	}
	return true, d.store.Flush(ctx)
}

func (d *documentStore) ListDocuments(ctx context.Context) ([]pipeline.DocumentInfo, error) {
	return d.list(ctx)
}
