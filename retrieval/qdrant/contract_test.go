package qdrant

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	qc "github.com/qdrant/go-client/qdrant"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"ragtime"
	"ragtime/pipeline"
	"ragtime/retrieval"
	"ragtime/retrieval/qdrant/qdranttest"
)

const dim = 4

// vec is a unit-ish test vector pointing mostly along axis i.
func vec(i int, tilt float32) []float32 {
	v := []float32{tilt, tilt, tilt, tilt}
	v[i%dim] = 1
	return v
}

func testDoc(id, title string, lang string, axes ...int) retrieval.Document {
	d := retrieval.Document{DocID: id, Title: title, ContentHash: "hash-" + id, Source: "/corpus/" + id}
	for i, a := range axes {
		d.Chunks = append(d.Chunks, pipeline.Chunk{Text: fmt.Sprintf("%s chunk %d", id, i), Metadata: map[string]string{"lang": lang, "type": "markdown"}})
		d.Vectors = append(d.Vectors, vec(a, 0.05*float32(i)+0.1*float32(id[0]-'a')))
	}
	return d
}

func ids(hits []pipeline.Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.ID)
	}
	return out
}

func wantCode(t *testing.T, err error, code string) *ragtime.Error {
	t.Helper()
	var pe *ragtime.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("error %v: want code %s", err, code)
	}
	return pe
}

// runSuite is the behaviour every Qdrant (the fake and a real one) must
// show through Store: create on first write, replace, search with limits
// and filters, list, delete, and refuse another embedder's collection.
func runSuite(t *testing.T, addr, collection string) {
	ctx := context.Background()
	cfg := Config{Addr: addr, APIKey: os.Getenv("QDRANT_API_KEY"), Collection: collection, Dimension: dim, Embedder: "test-embedder", HNSWM: 8, HNSWEfConstruct: 64, HNSWEf: 32, Int8: true, Create: true}
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if err := s.ReplaceDocument(ctx, testDoc("a.md", "Alpha", "en", 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReplaceDocument(ctx, testDoc("b.md", "Beta", "de", 3, 1)); err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(ctx, vec(1, 0), 3, pipeline.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 3 || hits[0].ID != "a.md#1" || hits[1].ID != "b.md#1" {
		t.Fatalf("search hits %v: want a.md#1, b.md#1 first", ids(hits))
	}
	h := hits[0]
	if h.DocID != "a.md" || h.Title != "Alpha" || h.Index != 1 || h.Text != "a.md chunk 1" || h.Metadata["lang"] != "en" || math.Abs(h.Score-float64(qdranttest.Cosine(vec(1, 0), vec(1, 0.05)))) > 1e-3 {
		t.Errorf("hit %+v: payload or score not round-tripped", h)
	}
	for i := 1; i < len(hits); i++ {
		if hits[i].Score > hits[i-1].Score {
			t.Errorf("hits not best first: %v", hits)
		}
	}

	if hits, err = s.Search(ctx, vec(1, 0), 10, pipeline.Filter{DocIDs: []string{"b.md"}}); err != nil || !slices.Equal(ids(hits), []string{"b.md#1", "b.md#0"}) {
		t.Errorf("doc_id filter: %v, %v", ids(hits), err)
	}
	if hits, err = s.Search(ctx, vec(0, 0), 10, pipeline.Filter{Metadata: map[string]string{"lang": "de"}}); err != nil || len(hits) != 2 || hits[0].DocID != "b.md" {
		t.Errorf("metadata filter: %v, %v", ids(hits), err)
	}
	if hits, err = s.Search(ctx, vec(0, 0), 10, pipeline.Filter{Metadata: map[string]string{"lang": "fr"}}); err != nil || len(hits) != 0 {
		t.Errorf("filter matching nothing: %v, %v", ids(hits), err)
	}

	if h, ok, err := s.StoredHash(ctx, "a.md"); err != nil || !ok || h != "hash-a.md" {
		t.Errorf("StoredHash(a.md) = %q %v %v", h, ok, err)
	}
	if _, ok, err := s.StoredHash(ctx, "zzz.md"); err != nil || ok {
		t.Errorf("StoredHash of an unknown doc = %v %v", ok, err)
	}

	// Replacing with fewer chunks removes the tail: nothing stale is found.
	short := testDoc("a.md", "Alpha 2", "en", 2)
	short.ContentHash = "hash-a2"
	if err := s.ReplaceDocument(ctx, short); err != nil {
		t.Fatal(err)
	}
	if hits, err = s.Search(ctx, vec(1, 0), 10, pipeline.Filter{DocIDs: []string{"a.md"}}); err != nil || !slices.Equal(ids(hits), []string{"a.md#0"}) || hits[0].Title != "Alpha 2" {
		t.Errorf("after replace: %v, %v", ids(hits), err)
	}
	docs, err := s.Documents(ctx)
	want := []ragtime.DocumentInfo{{DocID: "a.md", Title: "Alpha 2", ContentHash: "hash-a2", Chunks: 1}, {DocID: "b.md", Title: "Beta", ContentHash: "hash-b.md", Chunks: 2}}
	if err != nil || !slices.Equal(docs, want) {
		t.Errorf("Documents = %+v, %v; want %+v", docs, err, want)
	}

	if ok, err := s.DeleteDocument(ctx, "b.md"); err != nil || !ok {
		t.Errorf("DeleteDocument(b.md) = %v, %v", ok, err)
	}
	if ok, err := s.DeleteDocument(ctx, "b.md"); err != nil || ok {
		t.Errorf("second DeleteDocument(b.md) = %v, %v", ok, err)
	}
	if hits, err = s.Search(ctx, vec(3, 0), 10, pipeline.Filter{}); err != nil || !slices.Equal(ids(hits), []string{"a.md#0"}) {
		t.Errorf("after delete: %v, %v", ids(hits), err)
	}

	// Another embedder, or another dimension, is refused, never searched.
	other := cfg
	other.Embedder = "another-embedder"
	_, err = Open(ctx, other)
	if pe := wantCode(t, err, CodeDimensionMismatch); !strings.Contains(pe.Message, "test-embedder") {
		t.Errorf("mismatch message %q does not name the collection's embedder", pe.Message)
	}
	other = cfg
	other.Dimension = dim + 1
	_, err = Open(ctx, other)
	wantCode(t, err, CodeDimensionMismatch)

	// A missing collection: Open succeeds (serve may start first); a
	// search says what to do.
	missing := cfg
	missing.Collection = collection + "-missing"
	missing.Create = false
	ms, err := Open(ctx, missing)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	_, err = ms.Search(ctx, vec(0, 0), 3, pipeline.Filter{})
	if pe := wantCode(t, err, CodeCollectionMissing); !strings.Contains(pe.Hint, "ragtime ingest") {
		t.Errorf("hint %q does not say to run ragtime ingest", pe.Hint)
	}
	if docs, err := ms.Documents(ctx); err != nil || len(docs) != 0 {
		t.Errorf("Documents of a missing collection = %v, %v", docs, err)
	}
}

// TestQdrantContract runs the suite against the in-process fake and checks
// every request ragtime sent: collection parameters, point ids, payloads,
// filters and limits.
func TestQdrantContract(t *testing.T) {
	t.Parallel()
	f, addr := qdranttest.Start(t)
	runSuite(t, addr, "contract")

	creates := qdranttest.Recorded[*qc.CreateCollection](f)
	if len(creates) != 1 {
		t.Fatalf("%d CreateCollection requests, want 1 (only the first write creates)", len(creates))
	}
	cr := creates[0]
	vp := cr.GetVectorsConfig().GetParams()
	if cr.GetCollectionName() != "contract" || vp.GetSize() != dim || vp.GetDistance() != qc.Distance_Cosine {
		t.Errorf("collection params %v", cr)
	}
	if cr.GetHnswConfig().GetM() != 8 || cr.GetHnswConfig().GetEfConstruct() != 64 {
		t.Errorf("hnsw config %v, want m 8 ef_construct 64", cr.GetHnswConfig())
	}
	if sq := cr.GetQuantizationConfig().GetScalar(); sq == nil || sq.GetType() != qc.QuantizationType_Int8 {
		t.Errorf("quantization %v, want int8 scalar", cr.GetQuantizationConfig())
	}
	if m := cr.GetMetadata(); m[MetaEmbedder].GetStringValue() != "test-embedder" || m[MetaDimension].GetIntegerValue() != dim {
		t.Errorf("collection metadata %v", m)
	}
	idx := qdranttest.Recorded[*qc.CreateFieldIndexCollection](f)
	if len(idx) != 1 || idx[0].GetFieldName() != KeyDocID || idx[0].GetFieldType() != qc.FieldType_FieldTypeKeyword {
		t.Errorf("payload indexes %v, want one keyword index on doc_id", idx)
	}

	batches := qdranttest.Recorded[*qc.UpdateBatchPoints](f)
	if len(batches) != 3 {
		t.Fatalf("%d UpdateBatch requests, want 3 (a, b, a again)", len(batches))
	}
	first := batches[0]
	if !first.GetWait() || len(first.GetOperations()) != 2 {
		t.Fatalf("first batch %v: want wait and upsert + delete-stale", first)
	}
	pts := first.GetOperations()[0].GetUpsert().GetPoints()
	if len(pts) != 3 {
		t.Fatalf("upserted %d points, want 3", len(pts))
	}
	for i, p := range pts {
		if p.GetId().GetUuid() != PointID("a.md", i) {
			t.Errorf("point %d id %s, want UUIDv5 %s", i, p.GetId().GetUuid(), PointID("a.md", i))
		}
		pl := p.GetPayload()
		if pl[KeyDocID].GetStringValue() != "a.md" || pl[KeyTitle].GetStringValue() != "Alpha" || pl[KeyChunk].GetIntegerValue() != int64(i) ||
			pl[KeyText].GetStringValue() != fmt.Sprintf("a.md chunk %d", i) || pl[KeySource].GetStringValue() != "/corpus/a.md" ||
			pl[KeyMetadata].GetStructValue().GetFields()["lang"].GetStringValue() != "en" || pl[KeyContentHash].GetStringValue() != "hash-a.md" {
			t.Errorf("point %d payload %v", i, pl)
		}
	}
	stale := first.GetOperations()[1].GetDeletePoints().GetPoints().GetFilter().GetMust()
	if len(stale) != 2 || stale[0].GetField().GetMatch().GetKeyword() != "a.md" || stale[1].GetField().GetRange().GetGte() != 3 {
		t.Errorf("stale-chunk delete filter %v: want doc_id = a.md and chunk >= 3", stale)
	}
	if PointID("a.md", 0) == PointID("a.md", 1) || PointID("a.md", 0) != PointID("a.md", 0) {
		t.Error("point ids are not deterministic per (doc, chunk)")
	}

	queries := qdranttest.Recorded[*qc.QueryPoints](f)
	if len(queries) < 5 {
		t.Fatalf("%d Query requests", len(queries))
	}
	q0 := queries[0]
	if q0.GetLimit() != 3 || q0.GetParams().GetHnswEf() != 32 || q0.GetFilter() != nil || q0.ScoreThreshold != nil {
		t.Errorf("first query limit %d ef %d filter %v threshold %v", q0.GetLimit(), q0.GetParams().GetHnswEf(), q0.GetFilter(), q0.ScoreThreshold)
	}
	if m := queries[1].GetFilter().GetMust(); len(m) != 1 || m[0].GetField().GetKey() != KeyDocID || !slices.Equal(m[0].GetField().GetMatch().GetKeywords().GetStrings(), []string{"b.md"}) {
		t.Errorf("doc_id filter sent as %v", m)
	}
	if m := queries[2].GetFilter().GetMust(); len(m) != 1 || m[0].GetField().GetKey() != "metadata.lang" || m[0].GetField().GetMatch().GetKeyword() != "de" {
		t.Errorf("metadata filter sent as %v", m)
	}
}

func TestQdrantScoreThreshold(t *testing.T) {
	t.Parallel()
	f, addr := qdranttest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{Addr: addr, Collection: "c", Dimension: dim, Embedder: "e", Create: true, ScoreThreshold: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ReplaceDocument(ctx, testDoc("a.md", "A", "en", 0, 1)); err != nil {
		t.Fatal(err)
	}
	hits, err := s.Search(ctx, vec(0, 0), 5, pipeline.Filter{})
	if err != nil || !slices.Equal(ids(hits), []string{"a.md#0"}) {
		t.Errorf("hits %v, %v: want only the one above 0.9", ids(hits), err)
	}
	if q := qdranttest.Recorded[*qc.QueryPoints](f); len(q) != 1 || q[0].GetScoreThreshold() != 0.9 || q[0].Params != nil {
		t.Errorf("query %v: want score_threshold 0.9 and no params when ef is unset", q)
	}
	if _, err := s.Search(ctx, []float32{1, 2}, 5, pipeline.Filter{}); err == nil {
		t.Error("a query of the wrong dimension was sent")
	} else {
		wantCode(t, err, CodeDimensionMismatch)
	}
}

func TestQdrantErrorsAreClassified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Nothing listens on a port we just closed.
	_, addr := qdranttest.Start(t)
	f2, addr2 := qdranttest.Start(t)
	// The timeout also bounds Open's own calls, which a loaded machine can
	// stretch past a few hundred milliseconds: 2 s, so only the blocked
	// search can reach it.
	s, err := Open(ctx, Config{Addr: addr2, Collection: "c", Dimension: dim, Embedder: "e", Create: true, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f2.Block(true)
	_, err = s.Search(ctx, vec(0, 0), 3, pipeline.Filter{})
	wantCode(t, err, CodeTimeout)

	closed := "127.0.0.1:1"
	_, err = Open(ctx, Config{Addr: closed, Collection: "c", Dimension: dim, Embedder: "e", Timeout: 2 * time.Second})
	if pe := wantCode(t, err, CodeUnavailable); !strings.Contains(pe.Message, closed) {
		t.Errorf("unavailable message %q does not name the address", pe.Message)
	}
	_ = addr

	for _, bad := range []string{"localhost", "qdrant:http", "h:0"} {
		if _, err := Open(ctx, Config{Addr: bad, Collection: "c", Dimension: dim, Embedder: "e"}); err == nil || !strings.Contains(err.Error(), "--qdrant-url") {
			t.Errorf("address %q: %v, want an error naming --qdrant-url", bad, err)
		}
	}
	if _, err := Open(ctx, Config{Addr: addr2, Dimension: dim, Embedder: "e"}); err == nil || !strings.Contains(err.Error(), "--qdrant-collection") {
		t.Errorf("no collection: %v", err)
	}
}

// TestQdrantIntegration runs the same suite against a real Qdrant when
// QDRANT_URL (host:port of its gRPC endpoint) is set. None can be installed
// on the development machines, so it normally skips.
func TestQdrantIntegration(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("QDRANT_URL")
	if addr == "" {
		t.Skip("QDRANT_URL is not set (host:6334 of a real Qdrant); skipped the integration run of the contract suite")
	}
	name := fmt.Sprintf("ragtime_test_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		host, port, _ := strings.Cut(addr, ":")
		var p int
		fmt.Sscan(port, &p)
		c, err := qc.NewClient(&qc.Config{Host: host, Port: p, APIKey: os.Getenv("QDRANT_API_KEY"), SkipCompatibilityCheck: true})
		if err == nil {
			c.DeleteCollection(context.Background(), name)
			c.DeleteCollection(context.Background(), name+"_hybrid")
			c.Close()
		}
	})
	runSuite(t, addr, name)
	runHybridSuite(t, addr, name+"_hybrid")
}

// TestSearchCarriesTheTraceContext: a search made within a traced query
// sends the query's W3C traceparent in its gRPC metadata; one without a
// trace sends none.
func TestSearchCarriesTheTraceContext(t *testing.T) {
	// The propagator tracing.Setup installs as the global one.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	f, addr := qdranttest.Start(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{Addr: addr, Collection: "traced", Dimension: dim, Embedder: "test-embedder", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ReplaceDocument(ctx, testDoc("a.md", "Alpha", "en", 0)); err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xa}, SpanID: trace.SpanID{0xb}, TraceFlags: trace.FlagsSampled})
	for _, c := range []context.Context{trace.ContextWithSpanContext(ctx, sc), ctx} {
		if _, err := s.Search(c, vec(1, 0), 1, pipeline.Filter{}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"00-0a000000000000000000000000000000-0b00000000000000-01", ""}
	if got := f.TraceParents(); !slices.Equal(got, want) {
		t.Errorf("searches carried traceparent %q, want %q", got, want)
	}
}
