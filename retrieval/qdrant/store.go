package qdrant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	qc "github.com/qdrant/go-client/qdrant"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"ragtime"
	"ragtime/pipeline"
	"ragtime/retrieval"
)

var (
	_ pipeline.Searcher       = (*Store)(nil)
	_ pipeline.HybridSearcher = (*Store)(nil)
	_ retrieval.Store         = (*Store)(nil)
)

// StoreName is the `store` attribute of the search stage.
const StoreName = "qdrant"

// Error codes carried by *ragtime.Error, declared in package ragtime with
// the other codes.
const (
	CodeUnavailable       = ragtime.CodeStoreUnavailable
	CodeCollectionMissing = ragtime.CodeStoreCollectionMissing
	CodeDimensionMismatch = ragtime.CodeStoreDimensionMismatch
	CodeTimeout           = ragtime.CodeStoreTimeout
	CodeAuth              = ragtime.CodeStoreAuth
	// CodeSettingsMismatch: the existing collection was created with a
	// cluster setting Qdrant cannot change afterwards (shard_number, the
	// sharding method) that differs from the configured one.
	CodeSettingsMismatch = ragtime.CodeStoreSettingsMismatch
)

// Payload keys of every point.
const (
	KeyDocID       = "doc_id"
	KeyTitle       = "title"
	KeyChunk       = "chunk"
	KeyText        = "text"
	KeySource      = "source"
	KeyMetadata    = "metadata"
	KeyContentHash = "content_hash"
	// KeyShard is the shard key a point was written to, with tenant
	// sharding (Cluster.TenantKey).
	KeyShard = "shard_key"
)

// Collection metadata keys recording what the vectors are.
const (
	MetaEmbedder  = "ragtime_embedder"
	MetaDimension = "ragtime_dimension"
)

// Config configures Open.
type Config struct {
	// Addr is the gRPC address, host:port (Qdrant's gRPC port is 6334).
	Addr string
	// APIKey is sent as the api-key header when not empty.
	APIKey string
	// TLS connects over TLS.
	TLS bool
	// Collection is the collection name.
	Collection string
	// Dimension and Embedder describe the configured embedder; a collection
	// built by another is refused.
	Dimension int
	Embedder  string
	// HNSWM and HNSWEfConstruct set the HNSW graph of a new collection
	// (0: Qdrant's defaults, 16 and 100).
	HNSWM           int
	HNSWEfConstruct int
	// HNSWEf is the search-time ef (0: Qdrant's default).
	HNSWEf int
	// Int8 turns on int8 scalar quantization for a new collection.
	Int8 bool
	// ScoreThreshold drops hits scoring below it (0: keep all).
	ScoreThreshold float64
	// Timeout bounds each call (0: 10 s).
	Timeout time.Duration
	// Create creates the collection when it is missing (ingest does; serve
	// creates it on its first write instead).
	Create bool
	// Cluster holds the collection's distribution settings (shards,
	// replicas, on-disk storage, read consistency, tenant sharding).
	Cluster Cluster
	// Logger receives the warnings of settings that differ from an
	// existing collection's but that Qdrant can change in place; nil
	// discards them.
	Logger *slog.Logger
}

// Store is a Qdrant collection holding ragtime's chunks. It is safe for
// concurrent use.
type Store struct {
	cfg    Config
	client *qc.Client

	ensureMu sync.Mutex  // serialises the collection check and creation
	ready    atomic.Bool // the collection exists and matches the embedder
	// lexical is whether the collection has the sparse vector SparseName:
	// lexUnknown until the collection was read or created.
	lexical atomic.Int32
	// lexicalWhy says why the leg is absent (lexAbsent): no sparse vector,
	// or sparse vectors of another encoding than LexicalEncoding.
	lexicalWhy atomic.Pointer[string]

	shardMu   sync.Mutex      // guards shardKeys
	shardKeys map[string]bool // tenant shard keys known to exist
}

// pointNamespace is the UUIDv5 namespace of point ids: a fixed random
// UUID, so the id of chunk i of a document is the same in every process.
var pointNamespace = uuid.MustParse("5d3c5f8e-2f4b-4a53-9a4c-7d7b8e0b6a11")

// PointID returns the id of chunk i of docID: UUIDv5 of "<docID>#<i>", so a
// re-ingest overwrites the same points.
func PointID(docID string, i int) string {
	return uuid.NewSHA1(pointNamespace, []byte(retrieval.ChunkID(docID, i))).String()
}

// Open connects to Qdrant and checks the collection: when it exists its
// dimension and embedder must match; when missing it is created if
// cfg.Create is set, else searches fail with store_collection_missing until
// it appears (Open itself succeeds, so serve can start before the first
// ingest).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	host, portText, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("--qdrant-url %q: want host:port (gRPC, usually port 6334): %w", cfg.Addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("--qdrant-url %q: port %q is not a number between 1 and 65535", cfg.Addr, portText)
	}
	switch {
	case cfg.Collection == "":
		return nil, errors.New("--qdrant-collection is empty")
	case cfg.Dimension < 1:
		return nil, fmt.Errorf("opening qdrant store: dimension %d must be positive", cfg.Dimension)
	case cfg.Embedder == "":
		return nil, errors.New("opening qdrant store: no embedder name given")
	case cfg.HNSWM < 0 || cfg.HNSWEfConstruct < 0 || cfg.HNSWEf < 0:
		return nil, errors.New("--qdrant-hnsw-m, --qdrant-hnsw-ef-construct and --qdrant-hnsw-ef must not be negative")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	client, err := qc.NewClient(&qc.Config{
		Host: host, Port: port, APIKey: cfg.APIKey, UseTLS: cfg.TLS,
		// Our own first call reports an unreachable server with the
		// address; the client's version check would only log it.
		SkipCompatibilityCheck: true,
		PoolSize:               1,
		GrpcOptions:            []grpc.DialOption{grpc.WithStatsHandler(traceContext())},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to qdrant at %s: %w", cfg.Addr, err)
	}
	if err := cfg.Cluster.Validate(); err != nil {
		client.Close()
		return nil, err
	}
	s := &Store{cfg: cfg, client: client, shardKeys: map[string]bool{}}
	if err := s.ensure(ctx, cfg.Create); err != nil && !collectionMissing(err) {
		client.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the connection.
func (s *Store) Close() error { return s.client.Close() }

// Name returns "qdrant".
func (s *Store) Name() string { return StoreName }

// Ready checks that Qdrant answers and the collection is usable.
func (s *Store) Ready(ctx context.Context) error { return s.ensure(ctx, false) }

// collectionMissing reports whether err says the collection does not
// exist (CodeCollectionMissing, the store's one KindUpstreamNotFound).
func collectionMissing(err error) bool {
	var pe *ragtime.Error
	return errors.As(err, &pe) && pe.Kind == ragtime.KindUpstreamNotFound
}

// call bounds one request by the configured timeout.
func (s *Store) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.Timeout)
}

// ensure checks (once it succeeded, never again) that the collection exists
// and was built for the configured embedder, creating it when create is set.
func (s *Store) ensure(ctx context.Context, create bool) error {
	if s.ready.Load() {
		return nil
	}
	s.ensureMu.Lock()
	defer s.ensureMu.Unlock()
	if s.ready.Load() {
		return nil
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	exists, err := s.client.CollectionExists(cctx, s.cfg.Collection)
	if err != nil {
		return s.classify(ctx, "checking the collection", err)
	}
	if !exists {
		if !create {
			return s.missing(nil)
		}
		if err := s.create(cctx); err != nil {
			return err
		}
		s.lexical.CompareAndSwap(lexUnknown, lexPresent)
		s.ready.Store(true)
		return nil
	}
	info, err := s.client.GetCollectionInfo(cctx, s.cfg.Collection)
	if err != nil {
		return s.classify(ctx, "reading the collection", err)
	}
	if err := s.check(info); err != nil {
		return err
	}
	if err := s.checkCluster(info); err != nil {
		return err
	}
	s.ready.Store(true)
	return nil
}

func (s *Store) missing(err error) error {
	return &ragtime.Error{Kind: ragtime.KindUpstreamNotFound, Code: CodeCollectionMissing,
		Message: fmt.Sprintf("qdrant collection %q does not exist at %s", s.cfg.Collection, s.cfg.Addr),
		Hint:    "run `ragtime ingest --store qdrant` (or POST /v1/documents) to create and fill it, or check --qdrant-collection",
		Err:     err}
}

// check refuses a collection whose vectors are not the configured
// embedder's: searching it would return noise.
func (s *Store) check(info *qc.CollectionInfo) error {
	s.noteLexical(info)
	params := info.GetConfig().GetParams().GetVectorsConfig().GetParams()
	if params == nil {
		return s.mismatch("it has no single unnamed dense vector")
	}
	if int(params.GetSize()) != s.cfg.Dimension {
		return s.mismatch(fmt.Sprintf("it holds %d-dimensional vectors, the embedder makes %d", params.GetSize(), s.cfg.Dimension))
	}
	meta := info.GetConfig().GetMetadata()
	if got := meta[MetaEmbedder].GetStringValue(); got != s.cfg.Embedder {
		if got == "" {
			got = "an unknown embedder (no " + MetaEmbedder + " in its metadata)"
		}
		return s.mismatch(fmt.Sprintf("it was built by %s, the configured embedder is %s", got, s.cfg.Embedder))
	}
	return nil
}

func (s *Store) mismatch(why string) error {
	return &ragtime.Error{Kind: ragtime.KindUpstreamRejected, Code: CodeDimensionMismatch,
		Message: fmt.Sprintf("qdrant collection %q cannot be searched with this embedder: %s", s.cfg.Collection, why),
		Hint:    "use the embedder the collection was built with, or another --qdrant-collection (or delete it and re-ingest)"}
}

func (s *Store) create(ctx context.Context) error {
	req := &qc.CreateCollection{
		CollectionName: s.cfg.Collection,
		VectorsConfig: qc.NewVectorsConfig(&qc.VectorParams{
			Size: uint64(s.cfg.Dimension), Distance: qc.Distance_Cosine, OnDisk: s.cfg.Cluster.onDiskVectors(),
		}),
		SparseVectorsConfig: sparseConfig(),
		Metadata: qc.NewValueMap(map[string]any{
			MetaEmbedder: s.cfg.Embedder, MetaDimension: int64(s.cfg.Dimension), MetaLexical: LexicalEncoding,
		}),
	}
	if s.cfg.HNSWM > 0 || s.cfg.HNSWEfConstruct > 0 {
		h := &qc.HnswConfigDiff{}
		if s.cfg.HNSWM > 0 {
			h.M = ptr(uint64(s.cfg.HNSWM))
		}
		if s.cfg.HNSWEfConstruct > 0 {
			h.EfConstruct = ptr(uint64(s.cfg.HNSWEfConstruct))
		}
		req.HnswConfig = h
	}
	if s.cfg.Int8 {
		req.QuantizationConfig = qc.NewQuantizationScalar(&qc.ScalarQuantization{
			Type: qc.QuantizationType_Int8, AlwaysRam: ptr(true),
		})
	}
	s.cfg.Cluster.apply(req)
	if err := s.client.CreateCollection(ctx, req); err != nil {
		if status.Code(err) == codes.AlreadyExists {
			// Another replica created it between our check and our
			// create: check it as an existing collection.
			info, ierr := s.client.GetCollectionInfo(ctx, s.cfg.Collection)
			if ierr != nil {
				return s.classify(ctx, "reading the collection", ierr)
			}
			if err := s.check(info); err != nil {
				return err
			}
			return s.checkCluster(info)
		}
		return s.classify(ctx, "creating the collection", err)
	}
	_, err := s.client.CreateFieldIndex(ctx, &qc.CreateFieldIndexCollection{
		CollectionName: s.cfg.Collection, FieldName: KeyDocID,
		FieldType: qc.FieldType_FieldTypeKeyword.Enum(), Wait: ptr(true),
	})
	if err != nil {
		return s.classify(ctx, "indexing doc_id", err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// Search returns the k points nearest to query (cosine), best first.
func (s *Store) Search(ctx context.Context, query []float32, k int, filter pipeline.Filter) ([]pipeline.Hit, error) {
	if len(query) != s.cfg.Dimension {
		return nil, &ragtime.Error{Kind: ragtime.KindUpstreamRejected, Code: CodeDimensionMismatch,
			Message: fmt.Sprintf("query vector has %d dimensions, collection %q has %d", len(query), s.cfg.Collection, s.cfg.Dimension)}
	}
	if k <= 0 {
		return nil, nil
	}
	if err := s.ensure(ctx, false); err != nil {
		return nil, err
	}
	req := &qc.QueryPoints{
		CollectionName: s.cfg.Collection,
		Query:          qc.NewQueryDense(slices.Clone(query)),
		Limit:          ptr(uint64(k)),
		Filter:         toFilter(filter),
		WithPayload:    qc.NewWithPayloadInclude(KeyDocID, KeyTitle, KeyChunk, KeyText, KeyMetadata),
	}
	if s.cfg.HNSWEf > 0 {
		req.Params = &qc.SearchParams{HnswEf: ptr(uint64(s.cfg.HNSWEf))}
	}
	if s.cfg.ScoreThreshold != 0 {
		req.ScoreThreshold = ptr(float32(s.cfg.ScoreThreshold))
	}
	req.ReadConsistency = s.cfg.Cluster.readConsistency()
	tenant := s.cfg.Cluster.tenantOf(filter.Metadata)
	if tenant != "" {
		req.ShardKeySelector = shardSelector(tenant)
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	points, err := s.client.Query(cctx, req)
	if err != nil {
		if tenant != "" && isMissingShardKey(err) {
			return nil, nil // the tenant has no documents yet
		}
		return nil, s.classify(ctx, "searching", err)
	}
	hits := make([]pipeline.Hit, 0, len(points))
	for _, p := range points {
		hits = append(hits, pipeline.Hit{Chunk: toChunk(p.GetPayload()), Score: float64(p.GetScore())})
	}
	return hits, nil
}

// SearchAttrs are the search stage's extra attributes.
func (s *Store) SearchAttrs() map[string]any {
	return map[string]any{"ef": s.cfg.HNSWEf, "collection": s.cfg.Collection}
}

// toFilter maps /ask filters: doc ids (any of) and metadata key = value
// (all of).
func toFilter(f pipeline.Filter) *qc.Filter {
	var must []*qc.Condition
	if len(f.DocIDs) > 0 {
		must = append(must, qc.NewMatchKeywords(KeyDocID, f.DocIDs...))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Metadata)) {
		must = append(must, qc.NewMatchKeyword(KeyMetadata+"."+k, f.Metadata[k]))
	}
	if len(must) == 0 {
		return nil
	}
	return &qc.Filter{Must: must}
}

func docFilter(docID string) *qc.Filter {
	return &qc.Filter{Must: []*qc.Condition{qc.NewMatchKeyword(KeyDocID, docID)}}
}

func toChunk(p map[string]*qc.Value) pipeline.Chunk {
	c := pipeline.Chunk{
		DocID: p[KeyDocID].GetStringValue(),
		Title: p[KeyTitle].GetStringValue(),
		Index: int(p[KeyChunk].GetIntegerValue()),
		Text:  p[KeyText].GetStringValue(),
	}
	c.ID = retrieval.ChunkID(c.DocID, c.Index)
	if fields := p[KeyMetadata].GetStructValue().GetFields(); len(fields) > 0 {
		c.Metadata = make(map[string]string, len(fields))
		for k, v := range fields {
			c.Metadata[k] = v.GetStringValue()
		}
	}
	return c
}

// StoredHash returns the content hash stored with docID's first point.
func (s *Store) StoredHash(ctx context.Context, docID string) (string, bool, error) {
	if err := s.ensure(ctx, false); err != nil {
		if collectionMissing(err) {
			return "", false, nil
		}
		return "", false, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	pts, err := s.client.Scroll(cctx, &qc.ScrollPoints{
		CollectionName: s.cfg.Collection, Filter: docFilter(docID), Limit: ptr(uint32(1)),
		WithPayload: qc.NewWithPayloadInclude(KeyContentHash), ReadConsistency: s.cfg.Cluster.readConsistency(),
	})
	if err != nil {
		return "", false, s.classify(ctx, "looking up document "+docID, err)
	}
	if len(pts) == 0 {
		return "", false, nil
	}
	return pts[0].GetPayload()[KeyContentHash].GetStringValue(), true, nil
}

// ReplaceDocument upserts doc's chunks under their deterministic ids and
// deletes the points of chunks the new version no longer has, in one batch
// request. The chunks are ready before anything is written, so a failure
// while preparing a document leaves the old version searchable. A
// document without chunks is deleted.
func (s *Store) ReplaceDocument(ctx context.Context, doc retrieval.Document) error {
	if doc.DocID == "" {
		return errors.New("replacing document: empty doc id")
	}
	if len(doc.Chunks) != len(doc.Vectors) {
		return fmt.Errorf("replacing document %q: %d chunks but %d vectors", doc.DocID, len(doc.Chunks), len(doc.Vectors))
	}
	if err := s.ensure(ctx, true); err != nil {
		return err
	}
	tenant := ""
	if len(doc.Chunks) > 0 {
		tenant = s.cfg.Cluster.tenantOf(doc.Chunks[0].Metadata)
	}
	shard := s.cfg.Cluster.shardKeyOf(tenant)
	if shard != "" {
		if err := s.ensureShardKey(ctx, shard); err != nil {
			return err
		}
	}
	points := make([]*qc.PointStruct, len(doc.Chunks))
	for i, c := range doc.Chunks {
		if len(doc.Vectors[i]) != s.cfg.Dimension {
			return &ragtime.Error{Kind: ragtime.KindUpstreamRejected, Code: CodeDimensionMismatch,
				Message: fmt.Sprintf("chunk %d of %q has %d dimensions, collection %q has %d", i, doc.DocID, len(doc.Vectors[i]), s.cfg.Collection, s.cfg.Dimension)}
		}
		title := c.Title
		if title == "" {
			title = doc.Title
		}
		meta := make(map[string]any, len(c.Metadata))
		for k, v := range c.Metadata {
			meta[k] = v
		}
		payload := map[string]any{
			KeyDocID: doc.DocID, KeyTitle: title, KeyChunk: int64(i), KeyText: c.Text,
			KeySource: doc.Source, KeyMetadata: meta, KeyContentHash: doc.ContentHash,
		}
		if shard != "" {
			payload[KeyShard] = shard
		}
		points[i] = &qc.PointStruct{
			Id:      qc.NewID(PointID(doc.DocID, i)),
			Vectors: s.pointVectors(title, c.Text, doc.Vectors[i]),
			Payload: qc.NewValueMap(payload),
		}
	}
	stale := &qc.Filter{Must: []*qc.Condition{
		qc.NewMatchKeyword(KeyDocID, doc.DocID),
		qc.NewRange(KeyChunk, &qc.Range{Gte: ptr(float64(len(points)))}),
	}}
	var ops []*qc.PointsUpdateOperation
	if len(points) > 0 {
		up := &qc.PointsUpdateOperation_PointStructList{Points: points}
		if shard != "" {
			up.ShardKeySelector = shardSelector(shard)
		}
		ops = append(ops, qc.NewPointsUpdateUpsert(up))
	}
	// Without a shard key selector a delete reaches every shard, so the
	// stale chunks go wherever they are.
	ops = append(ops, qc.NewPointsUpdateDeletePoints(&qc.PointsUpdateOperation_DeletePoints{
		Points: qc.NewPointsSelectorFilter(stale),
	}))
	if shard != "" {
		// A document that moved to another tenant leaves no copy behind in
		// its old tenant's shard (same point ids, another shard key).
		moved := &qc.Filter{
			Must:    []*qc.Condition{qc.NewMatchKeyword(KeyDocID, doc.DocID)},
			MustNot: []*qc.Condition{qc.NewMatchKeyword(KeyShard, shard)},
		}
		ops = append(ops, qc.NewPointsUpdateDeletePoints(&qc.PointsUpdateOperation_DeletePoints{
			Points: qc.NewPointsSelectorFilter(moved),
		}))
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	if _, err := s.client.UpdateBatch(cctx, &qc.UpdateBatchPoints{
		CollectionName: s.cfg.Collection, Operations: ops, Wait: ptr(true),
	}); err != nil {
		return s.classify(ctx, "storing document "+doc.DocID, err)
	}
	return nil
}

// DeleteDocument deletes docID's points, reporting whether it had any.
func (s *Store) DeleteDocument(ctx context.Context, docID string) (bool, error) {
	if err := s.ensure(ctx, false); err != nil {
		if collectionMissing(err) {
			return false, nil
		}
		return false, err
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	n, err := s.client.Count(cctx, &qc.CountPoints{CollectionName: s.cfg.Collection, Filter: docFilter(docID), Exact: ptr(true),
		ReadConsistency: s.cfg.Cluster.readConsistency()})
	if err != nil {
		return false, s.classify(ctx, "counting document "+docID, err)
	}
	if n == 0 {
		return false, nil
	}
	if _, err := s.client.Delete(cctx, &qc.DeletePoints{
		CollectionName: s.cfg.Collection, Points: qc.NewPointsSelectorFilter(docFilter(docID)), Wait: ptr(true),
	}); err != nil {
		return false, s.classify(ctx, "deleting document "+docID, err)
	}
	return true, nil
}

// Documents lists the stored documents with their chunk counts, ordered by
// doc id, scrolling through every point's doc_id, title and hash.
func (s *Store) Documents(ctx context.Context) ([]ragtime.DocumentInfo, error) {
	if err := s.ensure(ctx, false); err != nil {
		if collectionMissing(err) {
			return nil, nil
		}
		return nil, err
	}
	docs := map[string]*ragtime.DocumentInfo{}
	var offset *qc.PointId
	for {
		cctx, cancel := s.call(ctx)
		pts, next, err := s.client.ScrollAndOffset(cctx, &qc.ScrollPoints{
			CollectionName: s.cfg.Collection, Offset: offset, Limit: ptr(uint32(1000)),
			WithPayload:     qc.NewWithPayloadInclude(KeyDocID, KeyTitle, KeyContentHash),
			ReadConsistency: s.cfg.Cluster.readConsistency(),
		})
		cancel()
		if err != nil {
			return nil, s.classify(ctx, "listing documents", err)
		}
		for _, p := range pts {
			pl := p.GetPayload()
			id := pl[KeyDocID].GetStringValue()
			d, ok := docs[id]
			if !ok {
				d = &ragtime.DocumentInfo{DocID: id, Title: pl[KeyTitle].GetStringValue(), ContentHash: pl[KeyContentHash].GetStringValue()}
				docs[id] = d
			}
			d.Chunks++
		}
		if next == nil || len(pts) == 0 {
			break
		}
		offset = next
	}
	out := make([]ragtime.DocumentInfo, 0, len(docs))
	for _, id := range slices.Sorted(maps.Keys(docs)) {
		out = append(out, *docs[id])
	}
	return out, nil
}

// Flush does nothing: every write waits for Qdrant to apply it.
func (s *Store) Flush(context.Context) error { return nil }

// classify turns a gRPC failure into a *ragtime.Error with a store_* code.
// The caller's own cancellation stays a plain wrapped error.
func (s *Store) classify(ctx context.Context, doing string, err error) error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("qdrant: %s: %w", doing, ctx.Err())
	}
	st, _ := status.FromError(err)
	msg := st.Message()
	switch {
	case st.Code() == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
		return &ragtime.Error{Kind: ragtime.KindTimeout, Code: CodeTimeout, Err: err,
			Message: fmt.Sprintf("qdrant at %s did not answer within %s while %s", s.cfg.Addr, s.cfg.Timeout, doing),
			Hint:    "check Qdrant's load, or lower top_k / --qdrant-hnsw-ef"}
	case st.Code() == codes.Unavailable:
		return &ragtime.Error{Kind: ragtime.KindUpstream, Code: CodeUnavailable, Err: err,
			Message: fmt.Sprintf("qdrant at %s is unreachable while %s", s.cfg.Addr, doing),
			Hint:    "check --qdrant-url (the gRPC port, usually 6334), --qdrant-tls and that Qdrant is running"}
	case st.Code() == codes.Unauthenticated || st.Code() == codes.PermissionDenied:
		return &ragtime.Error{Kind: ragtime.KindUpstreamAuth, Code: CodeAuth, Err: err,
			Message: fmt.Sprintf("qdrant at %s refused the API key while %s", s.cfg.Addr, doing),
			Hint:    "check the variable named by --qdrant-api-key-env"}
	case st.Code() == codes.NotFound && strings.Contains(strings.ToLower(msg), "collection"):
		s.ready.Store(false) // the next call checks (or creates) it again
		return s.missing(err)
	case st.Code() == codes.InvalidArgument && strings.Contains(strings.ToLower(msg), "dimension"):
		return &ragtime.Error{Kind: ragtime.KindUpstreamRejected, Code: CodeDimensionMismatch, Err: err,
			Message: fmt.Sprintf("qdrant collection %q rejected the vector while %s: %s", s.cfg.Collection, doing, msg),
			Hint:    "use the embedder the collection was built with, or another --qdrant-collection"}
	}
	return fmt.Errorf("qdrant at %s: %s: %w", s.cfg.Addr, doing, err)
}

// traceContext carries the query's W3C trace context (the search stage's
// span, when tracing is on) in each call's gRPC metadata, through
// OpenTelemetry's global propagator. It makes no spans of its own: the
// search stage's span, built from the stored timings, is the call's.
func traceContext() stats.Handler {
	return otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(tracenoop.NewTracerProvider()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()))
}
