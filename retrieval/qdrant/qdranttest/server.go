// Package qdranttest serves an in-process Qdrant for tests: a gRPC server on
// 127.0.0.1:0 built on go-client's generated server interfaces, which keeps
// collections in memory, answers searches with exact cosine similarity and
// records every request. It implements what ragtime's Qdrant store calls.
package qdranttest

import (
	"cmp"
	"context"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Server is an in-process Qdrant: it keeps collections and points in
// memory, answers searches with exact cosine similarity, applies the filter
// shapes ragtime sends, and records every request so tests can assert what
// went over the wire.
type Server struct {
	mu          sync.Mutex
	requests    []proto.Message
	collections map[string]*fakeCollection
	// block, when set, makes Query wait for the caller's deadline.
	block bool
	// traceparents are the W3C traceparent metadata of the Query calls.
	traceparents []string
}

// The generated Collections and Points services both have Get and Delete,
// so each is served by its own type over the shared state.
type (
	fakeCollections struct {
		qc.UnimplementedCollectionsServer
		*Server
	}
	fakePoints struct {
		qc.UnimplementedPointsServer
		*Server
	}
)

type fakeCollection struct {
	create  *qc.CreateCollection
	indexes map[string]qc.FieldType
	// points are keyed by shard key and id: with custom sharding the same
	// id may live under two shard keys, as in Qdrant.
	points map[string]*fakePoint
	// shardKeys are the shard keys created (custom sharding only).
	shardKeys map[string]bool
}

type fakePoint struct {
	id    string
	shard string
	vec   []float32
	// sparse are the point's named sparse vectors, index → value.
	sparse  map[string]map[uint32]float32
	payload map[string]*qc.Value
}

func (c *fakeCollection) custom() bool {
	return c.create.GetShardingMethod() == qc.ShardingMethod_Custom
}

// shardKeys resolves a request's selector against the collection: nil
// means every shard; an error names a missing key, as Qdrant does.
func (c *fakeCollection) selected(sel *qc.ShardKeySelector) (map[string]bool, error) {
	if sel == nil || len(sel.GetShardKeys()) == 0 {
		return nil, nil
	}
	if !c.custom() {
		return nil, status.Error(codes.InvalidArgument, "Wrong input: Shard key selector is only allowed for collections with custom sharding")
	}
	out := map[string]bool{}
	for _, k := range sel.GetShardKeys() {
		key := k.GetKeyword()
		if !c.shardKeys[key] {
			return nil, status.Errorf(codes.NotFound, "Not found: Shard key %s not found", key)
		}
		out[key] = true
	}
	return out, nil
}

// Start serves a Server on 127.0.0.1:0 until the test ends and returns it
// and its host:port.
func Start(t testing.TB) (*Server, string) {
	t.Helper()
	f := &Server{collections: map[string]*fakeCollection{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	qc.RegisterCollectionsServer(srv, fakeCollections{Server: f})
	qc.RegisterPointsServer(srv, fakePoints{Server: f})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return f, ln.Addr().String()
}

// TraceParents returns the traceparent metadata each search carried ("" for
// none), in order.
func (f *Server) TraceParents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.traceparents...)
}

// Block makes searches wait for the caller's deadline (to provoke timeouts).
func (f *Server) Block(on bool) {
	f.mu.Lock()
	f.block = on
	f.mu.Unlock()
}

func (f *Server) record(m proto.Message) {
	f.requests = append(f.requests, proto.Clone(m))
}

// Recorded returns the requests of type T the server received, in order.
func Recorded[T proto.Message](f *Server) []T {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []T
	for _, m := range f.requests {
		if r, ok := m.(T); ok {
			out = append(out, r)
		}
	}
	return out
}

func notFound(name string) error {
	return status.Errorf(codes.NotFound, "Not found: Collection `%s` doesn't exist!", name)
}

func (f *Server) collection(name string) (*fakeCollection, error) {
	c, ok := f.collections[name]
	if !ok {
		return nil, notFound(name)
	}
	return c, nil
}

func (f fakeCollections) CollectionExists(_ context.Context, r *qc.CollectionExistsRequest) (*qc.CollectionExistsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	_, ok := f.collections[r.GetCollectionName()]
	return &qc.CollectionExistsResponse{Result: &qc.CollectionExists{Exists: ok}}, nil
}

func (f fakeCollections) Create(_ context.Context, r *qc.CreateCollection) (*qc.CollectionOperationResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	if _, ok := f.collections[r.GetCollectionName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "Wrong input: Collection `%s` already exists!", r.GetCollectionName())
	}
	f.collections[r.GetCollectionName()] = &fakeCollection{create: proto.Clone(r).(*qc.CreateCollection),
		indexes: map[string]qc.FieldType{}, points: map[string]*fakePoint{}, shardKeys: map[string]bool{}}
	return &qc.CollectionOperationResponse{Result: true}, nil
}

func (f fakeCollections) Get(_ context.Context, r *qc.GetCollectionInfoRequest) (*qc.GetCollectionInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	n := uint64(len(c.points))
	// Qdrant reports its defaults for what the create left unset.
	shards := c.create.GetShardNumber()
	if shards == 0 {
		shards = 1
	}
	rf, wcf := max(c.create.GetReplicationFactor(), 1), max(c.create.GetWriteConsistencyFactor(), 1)
	return &qc.GetCollectionInfoResponse{Result: &qc.CollectionInfo{
		Status: qc.CollectionStatus_Green, PointsCount: &n,
		Config: &qc.CollectionConfig{
			Params: &qc.CollectionParams{VectorsConfig: c.create.GetVectorsConfig(), SparseVectorsConfig: c.create.GetSparseVectorsConfig(), ShardNumber: shards,
				ReplicationFactor: &rf, WriteConsistencyFactor: &wcf, OnDiskPayload: c.create.GetOnDiskPayload(),
				ShardingMethod: c.create.GetShardingMethod().Enum()},
			Metadata: c.create.GetMetadata(),
		},
	}}, nil
}

func (f fakeCollections) CreateShardKey(_ context.Context, r *qc.CreateShardKeyRequest) (*qc.CreateShardKeyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	if !c.custom() {
		return nil, status.Error(codes.InvalidArgument, "Wrong input: Shard keys can only be created for collections with custom sharding")
	}
	key := r.GetRequest().GetShardKey().GetKeyword()
	if c.shardKeys[key] {
		return nil, status.Errorf(codes.AlreadyExists, "Wrong input: Shard key %s already exists", key)
	}
	c.shardKeys[key] = true
	return &qc.CreateShardKeyResponse{Result: true}, nil
}

func (f fakePoints) Delete(_ context.Context, r *qc.DeletePoints) (*qc.PointsOperationResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	c.deleteMatching(r.GetPoints().GetFilter())
	return &qc.PointsOperationResponse{Result: &qc.UpdateResult{Status: qc.UpdateStatus_Completed}}, nil
}

func (f fakePoints) CreateFieldIndex(_ context.Context, r *qc.CreateFieldIndexCollection) (*qc.PointsOperationResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	c.indexes[r.GetFieldName()] = r.GetFieldType()
	return &qc.PointsOperationResponse{Result: &qc.UpdateResult{Status: qc.UpdateStatus_Completed}}, nil
}

func (f fakePoints) UpdateBatch(_ context.Context, r *qc.UpdateBatchPoints) (*qc.UpdateBatchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	// Validate everything first: Qdrant rejects a batch with a bad vector.
	for _, op := range r.GetOperations() {
		for _, p := range op.GetUpsert().GetPoints() {
			if _, _, err := c.vectors(p.GetVectors()); err != nil {
				return nil, err
			}
		}
	}
	// And every shard key: Qdrant refuses a batch naming a missing one,
	// and an upsert without one into a custom-sharded collection.
	for _, op := range r.GetOperations() {
		if up := op.GetUpsert(); up != nil {
			sel, err := c.selected(up.GetShardKeySelector())
			if err != nil {
				return nil, err
			}
			if c.custom() && len(sel) != 1 {
				return nil, status.Error(codes.InvalidArgument, "Wrong input: Shard key not specified: a collection with custom sharding needs exactly one shard key per upsert")
			}
		}
	}
	var res []*qc.UpdateResult
	for _, op := range r.GetOperations() {
		switch {
		case op.GetUpsert() != nil:
			shard := ""
			if keys := op.GetUpsert().GetShardKeySelector().GetShardKeys(); len(keys) == 1 {
				shard = keys[0].GetKeyword()
			}
			for _, p := range op.GetUpsert().GetPoints() {
				id := p.GetId().GetUuid()
				vec, sparse, _ := c.vectors(p.GetVectors())
				c.points[shard+"/"+id] = &fakePoint{id: id, shard: shard, vec: vec, sparse: sparse, payload: p.GetPayload()}
			}
		case op.GetDeletePoints() != nil:
			if op.GetDeletePoints().GetShardKeySelector() != nil {
				return nil, status.Error(codes.Unimplemented, "fake qdrant: delete with a shard key selector")
			}
			c.deleteMatching(op.GetDeletePoints().GetPoints().GetFilter())
		default:
			return nil, status.Error(codes.Unimplemented, "fake qdrant: unsupported batch operation")
		}
		res = append(res, &qc.UpdateResult{Status: qc.UpdateStatus_Completed})
	}
	return &qc.UpdateBatchResponse{Result: res}, nil
}

func (c *fakeCollection) deleteMatching(flt *qc.Filter) {
	for id, p := range c.points {
		if matches(flt, p.id, p.payload) {
			delete(c.points, id)
		}
	}
}

// sorted returns the points matching flt ordered by id, as Qdrant scrolls.
func (c *fakeCollection) sorted(flt *qc.Filter) []*fakePoint {
	var out []*fakePoint
	for _, p := range c.points {
		if matches(flt, p.id, p.payload) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *fakePoint) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.shard, b.shard)) })
	return out
}

func (f fakePoints) Scroll(_ context.Context, r *qc.ScrollPoints) (*qc.ScrollResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	pts := c.sorted(r.GetFilter())
	if off := r.GetOffset().GetUuid(); off != "" {
		i, _ := slices.BinarySearchFunc(pts, off, func(p *fakePoint, id string) int { return cmp.Compare(p.id, id) })
		pts = pts[i:]
	}
	limit := int(r.GetLimit())
	if limit == 0 {
		limit = 10
	}
	resp := &qc.ScrollResponse{}
	if len(pts) > limit {
		resp.NextPageOffset = qc.NewID(pts[limit].id)
		pts = pts[:limit]
	}
	for _, p := range pts {
		resp.Result = append(resp.Result, &qc.RetrievedPoint{Id: qc.NewID(p.id), Payload: p.payload})
	}
	return resp, nil
}

func (f fakePoints) Count(_ context.Context, r *qc.CountPoints) (*qc.CountResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(r)
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	return &qc.CountResponse{Result: &qc.CountResult{Count: uint64(len(c.sorted(r.GetFilter())))}}, nil
}

func (f fakePoints) Query(ctx context.Context, r *qc.QueryPoints) (*qc.QueryResponse, error) {
	f.mu.Lock()
	f.record(r)
	if err := f.enter(ctx); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	out, err := c.query(r)
	if err != nil {
		return nil, err
	}
	return &qc.QueryResponse{Result: out}, nil
}

// QueryBatch answers each query of the batch as Query would, in order;
// one failing query fails the batch, as in Qdrant.
func (f fakePoints) QueryBatch(ctx context.Context, r *qc.QueryBatchPoints) (*qc.QueryBatchResponse, error) {
	f.mu.Lock()
	f.record(r)
	if err := f.enter(ctx); err != nil {
		return nil, err
	}
	defer f.mu.Unlock()
	c, err := f.collection(r.GetCollectionName())
	if err != nil {
		return nil, err
	}
	resp := &qc.QueryBatchResponse{}
	for _, q := range r.GetQueryPoints() {
		out, err := c.query(q)
		if err != nil {
			return nil, err
		}
		resp.Result = append(resp.Result, &qc.BatchResult{Result: out})
	}
	return resp, nil
}

// enter notes a search's traceparent and, when the server blocks, waits
// for the caller's deadline (unlocking f.mu); it is called with f.mu held
// and returns with it held unless it returns an error.
func (f *Server) enter(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	f.traceparents = append(f.traceparents, strings.Join(md.Get("traceparent"), ","))
	if f.block {
		f.mu.Unlock()
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	return nil
}

// DefaultRRFK is the k of Qdrant's Fusion_RRF (and of an Rrf without k).
const DefaultRRFK = 2

// RRF is Qdrant's reciprocal rank fusion score of a point at 0-based
// position pos of one prefetch's list: 1/(k + pos). A point's fused score
// is the sum over the lists that hold it.
func RRF(k uint32, pos int) float32 { return 1 / (float32(pos) + float32(k)) }

// query answers one QueryPoints: a nearest query on the dense vector or a
// named sparse one, or a fusion (Fusion_RRF, or Rrf with its k) of its
// prefetches, each searched with its own query, filter (and the query's)
// and limit.
func (c *fakeCollection) query(r *qc.QueryPoints) ([]*qc.ScoredPoint, error) {
	shards, err := c.selected(r.GetShardKeySelector())
	if err != nil {
		return nil, err
	}
	var threshold *float32
	if r.ScoreThreshold != nil {
		threshold = r.ScoreThreshold
	}
	var out []*qc.ScoredPoint
	if len(r.GetPrefetch()) > 0 {
		var k uint32
		switch v := r.GetQuery().GetVariant().(type) {
		case *qc.Query_Fusion:
			if v.Fusion != qc.Fusion_RRF {
				return nil, status.Error(codes.Unimplemented, "fake qdrant: only RRF fusion")
			}
			k = DefaultRRFK
		case *qc.Query_Rrf:
			k = cmp.Or(v.Rrf.GetK(), DefaultRRFK)
		default:
			return nil, status.Error(codes.Unimplemented, "fake qdrant: a query over prefetches must be RRF")
		}
		fused := map[string]*qc.ScoredPoint{}
		for _, pf := range r.GetPrefetch() {
			var pfThreshold *float32
			if pf.ScoreThreshold != nil {
				pfThreshold = pf.ScoreThreshold
			}
			list, err := c.nearest(pf.GetQuery(), pf.GetUsing(), []*qc.Filter{r.GetFilter(), pf.GetFilter()}, shards, pfThreshold, int(pf.GetLimit()))
			if err != nil {
				return nil, err
			}
			for pos, p := range list {
				key := p.GetId().GetUuid()
				if fp := fused[key]; fp != nil {
					fp.Score += RRF(k, pos)
				} else {
					fused[key] = &qc.ScoredPoint{Id: p.Id, Score: RRF(k, pos), Payload: p.Payload}
				}
			}
		}
		for _, p := range fused {
			out = append(out, p)
		}
		slices.SortFunc(out, func(a, b *qc.ScoredPoint) int {
			return cmp.Or(cmp.Compare(b.Score, a.Score), cmp.Compare(a.GetId().GetUuid(), b.GetId().GetUuid()))
		})
		if l := int(cmp.Or(r.GetLimit(), 10)); len(out) > l {
			out = out[:l]
		}
		return out, nil
	}
	return c.nearest(r.GetQuery(), r.GetUsing(), []*qc.Filter{r.GetFilter()}, shards, threshold, int(cmp.Or(r.GetLimit(), 10)))
}

// nearest scores every point that passes the filters against a nearest
// query: cosine on the dense vector, or on the named sparse vector the dot
// product with each index weighed by its idf when the sparse vector has
// the idf modifier (ln(1 + (N − n + 0.5)/(n + 0.5)), N the points, n
// those holding the index), as Qdrant does. A sparse search returns only
// points sharing an index with the query. Best first, ties by id.
func (c *fakeCollection) nearest(q *qc.Query, using string, filters []*qc.Filter, shards map[string]bool, threshold *float32, limit int) ([]*qc.ScoredPoint, error) {
	in := q.GetNearest()
	var score func(p *fakePoint) (float32, bool)
	switch {
	case in.GetSparse() != nil:
		params := c.create.GetSparseVectorsConfig().GetMap()[using]
		if params == nil {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", using)
		}
		sq := in.GetSparse()
		if len(sq.GetIndices()) != len(sq.GetValues()) {
			return nil, status.Error(codes.InvalidArgument, "Wrong input: sparse vector indices and values differ in length")
		}
		weight := make([]float64, len(sq.GetIndices()))
		for i, ix := range sq.GetIndices() {
			weight[i] = float64(sq.GetValues()[i])
			if params.GetModifier() == qc.Modifier_Idf {
				var n float64
				for _, p := range c.points {
					if _, ok := p.sparse[using][ix]; ok {
						n++
					}
				}
				total := float64(len(c.points))
				weight[i] *= math.Log(1 + (total-n+0.5)/(n+0.5))
			}
		}
		score = func(p *fakePoint) (float32, bool) {
			var s float64
			hit := false
			for i, ix := range sq.GetIndices() {
				if v, ok := p.sparse[using][ix]; ok {
					s += weight[i] * float64(v)
					hit = true
				}
			}
			return float32(s), hit
		}
	case in.GetDense() != nil:
		if using != "" {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", using)
		}
		dq := in.GetDense().GetData()
		if dim := int(c.create.GetVectorsConfig().GetParams().GetSize()); len(dq) != dim {
			return nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", dim, len(dq))
		}
		score = func(p *fakePoint) (float32, bool) { return Cosine(dq, p.vec), true }
	default:
		return nil, status.Error(codes.Unimplemented, "fake qdrant: unsupported query "+q.String())
	}
	var out []*qc.ScoredPoint
	for _, p := range c.sorted(nil) {
		if shards != nil && !shards[p.shard] {
			continue
		}
		pass := true
		for _, f := range filters {
			pass = pass && matches(f, p.id, p.payload)
		}
		if !pass {
			continue
		}
		s, ok := score(p)
		if !ok || (threshold != nil && s < *threshold) {
			continue
		}
		out = append(out, &qc.ScoredPoint{Id: qc.NewID(p.id), Score: s, Payload: p.payload})
	}
	slices.SortStableFunc(out, func(a, b *qc.ScoredPoint) int { return cmp.Compare(b.Score, a.Score) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// vectors checks a point's vectors against the collection and returns its
// dense vector and sparse ones: either the one unnamed dense vector, or a
// named map whose "" entry is the dense vector and whose other entries
// are sparse vectors the collection declares (indices unique).
func (c *fakeCollection) vectors(v *qc.Vectors) ([]float32, map[string]map[uint32]float32, error) {
	dim := int(c.create.GetVectorsConfig().GetParams().GetSize())
	dense := v.GetVector().GetDense().GetData()
	var sparse map[string]map[uint32]float32
	if named := v.GetVectors().GetVectors(); named != nil {
		dense = named[""].GetDense().GetData()
		for name, vec := range named {
			if name == "" {
				continue
			}
			if c.create.GetSparseVectorsConfig().GetMap()[name] == nil {
				return nil, nil, status.Errorf(codes.InvalidArgument, "Wrong input: Not existing vector name error: %s", name)
			}
			sv := vec.GetSparse()
			if sv == nil || len(sv.GetIndices()) != len(sv.GetValues()) {
				return nil, nil, status.Errorf(codes.InvalidArgument, "Wrong input: vector %s is not a sparse vector with as many values as indices", name)
			}
			m := make(map[uint32]float32, len(sv.GetIndices()))
			for i, ix := range sv.GetIndices() {
				if _, dup := m[ix]; dup {
					return nil, nil, status.Errorf(codes.InvalidArgument, "Wrong input: sparse vector %s: indices must be unique, %d repeats", name, ix)
				}
				m[ix] = sv.GetValues()[i]
			}
			if sparse == nil {
				sparse = map[string]map[uint32]float32{}
			}
			sparse[name] = m
		}
	}
	if len(dense) != dim {
		return nil, nil, status.Errorf(codes.InvalidArgument, "Wrong input: Vector dimension error: expected dim: %d, got %d", dim, len(dense))
	}
	return dense, sparse, nil
}

// Cosine is the cosine similarity the server scores with.
func Cosine(a, b []float32) float32 {
	var d, na, nb float64
	for i := range a {
		d += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return float32(d / math.Sqrt(na*nb))
}

// matches evaluates the filter shapes ragtime sends: no MustNot condition
// holds, and every Must condition is a point id among those listed
// (has_id), or a field match (keyword or any-of keywords) or a numeric
// range, on a top-level key or a dotted path into a nested object.
func matches(flt *qc.Filter, id string, payload map[string]*qc.Value) bool {
	for _, c := range flt.GetMustNot() {
		if matches(&qc.Filter{Must: []*qc.Condition{c}}, id, payload) {
			return false
		}
	}
	for _, c := range flt.GetMust() {
		if hc := c.GetHasId(); hc != nil {
			if !slices.ContainsFunc(hc.GetHasId(), func(p *qc.PointId) bool { return p.GetUuid() == id }) {
				return false
			}
			continue
		}
		fc := c.GetField()
		if fc == nil {
			panic("fake qdrant: unsupported condition " + c.String())
		}
		v := lookup(payload, fc.GetKey())
		switch {
		case fc.GetMatch().GetKeyword() != "":
			if v.GetStringValue() != fc.GetMatch().GetKeyword() {
				return false
			}
		case fc.GetMatch().GetKeywords() != nil:
			if !slices.Contains(fc.GetMatch().GetKeywords().GetStrings(), v.GetStringValue()) || v == nil {
				return false
			}
		case fc.GetRange() != nil:
			if v == nil {
				return false
			}
			x := float64(v.GetIntegerValue())
			if rg := fc.GetRange(); rg.Gte != nil && x < rg.GetGte() {
				return false
			}
		default:
			panic("fake qdrant: unsupported field condition " + fc.String())
		}
	}
	return true
}

func lookup(payload map[string]*qc.Value, key string) *qc.Value {
	parts := strings.Split(key, ".")
	v := payload[parts[0]]
	for _, p := range parts[1:] {
		v = v.GetStructValue().GetFields()[p]
	}
	return v
}
