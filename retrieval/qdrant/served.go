package qdrant

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"ragtime"
)

// What a serving process asks of a vector store beyond searching and
// writing, as retrieval.Index answers it.

// Len is the number of stored chunks as far as this process knows: -1, as
// Qdrant keeps the count (see the collection's info).
func (s *Store) Len() int { return -1 }

// ListDocuments lists the stored documents (Documents).
func (s *Store) ListDocuments(ctx context.Context) ([]ragtime.DocumentInfo, error) {
	return s.Documents(ctx)
}

// Describe says where the collection is, for a CLI's summary.
func (s *Store) Describe() string {
	return fmt.Sprintf("qdrant collection %s at %s", s.cfg.Collection, s.cfg.Addr)
}

// Watch does nothing: every search reads Qdrant's current state.
func (s *Store) Watch(context.Context, time.Duration, *slog.Logger) (stop func()) { return func() {} }
