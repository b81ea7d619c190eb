// Package qdrant stores and searches chunk vectors in a Qdrant collection over
// gRPC (github.com/qdrant/go-client), as the production alternative to the
// embedded index. It implements pipeline.Searcher and the Ingester's Store,
// and classifies Qdrant's failures into the store_* codes of the SSE error event.
package qdrant
