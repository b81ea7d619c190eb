package main

import (
	"context"
	"fmt"

	"ragtime"
	"ragtime/api"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

var errReadOnly = fmt.Errorf("%w: serve runs with --read-only, or another process (an ingest, another serve) held the index's writer lock when it started", api.ErrReadOnly)

// documentStore serves /v1/documents from the configured vector store: the
// documentBatches is how many embedding batches one POST /v1/documents
// has in flight at once.
const documentBatches = 2

// Ingester chunks and embeds, the store keeps, lists and deletes.
type documentStore struct {
	in       *retrieval.Ingester
	store    store
	readOnly bool
}

func newDocumentStore(p *parts, readOnly bool, chunkSize, chunkOverlap int) *documentStore {
	d := &documentStore{
		in: &retrieval.Ingester{Embedder: p.embedder, Store: p.store, ChunkSize: chunkSize, ChunkOverlap: chunkOverlap,
			BatchSize: retrieval.DefaultBatchSize, Concurrency: documentBatches},
		store:    p.store,
		readOnly: readOnly,
	}
	return d
}

func (d *documentStore) PutDocuments(ctx context.Context, ins []pipeline.DocumentInput) ([]pipeline.DocumentResult, error) {
	if d.readOnly {
		return nil, errReadOnly
	}
	return d.in.IngestContents(ctx, ins)
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

func (d *documentStore) ListDocuments(ctx context.Context) ([]ragtime.DocumentInfo, error) {
	return d.store.ListDocuments(ctx)
}
