package qdrant

import (
	"bytes"
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"

	"ragtime/pipeline"
	"ragtime/retrieval"
	"ragtime/retrieval/qdrant/qdranttest"
)

// TestQdrantClusterSettings checks that the cluster settings reach the
// CreateCollection request and every read, and how an existing collection
// with other settings is met: an error for what Qdrant cannot change, a
// warning for what it can.
func TestQdrantClusterSettings(t *testing.T) {
	t.Parallel()
	f, addr := qdranttest.Start(t)
	ctx := context.Background()
	cluster := Cluster{ShardNumber: 3, ReplicationFactor: 2, WriteConsistencyFactor: 2, OnDiskVectors: true, OnDiskPayload: true, ReadConsistency: "majority"}
	cfg := Config{Addr: addr, Collection: "cl", Dimension: dim, Embedder: "e", Create: true, Cluster: cluster}
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ReplaceDocument(ctx, testDoc("a.md", "A", "en", 0, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Search(ctx, vec(0, 0), 2, pipeline.Filter{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.StoredHash(ctx, "a.md"); err != nil {
		t.Fatal(err)
	}

	cr := qdranttest.Recorded[*qc.CreateCollection](f)
	if len(cr) != 1 {
		t.Fatalf("%d creates", len(cr))
	}
	c := cr[0]
	if c.ShardNumber == nil || c.GetShardNumber() != 3 || c.GetReplicationFactor() != 2 || c.GetWriteConsistencyFactor() != 2 ||
		c.OnDiskPayload == nil || !c.GetOnDiskPayload() || !c.GetVectorsConfig().GetParams().GetOnDisk() || c.ShardingMethod != nil {
		t.Errorf("create request %v: want shard_number 3, replication_factor 2, write_consistency_factor 2, on-disk vectors and payload, auto sharding", c)
	}
	majority := qc.NewReadConsistencyType(qc.ReadConsistencyType_Majority)
	qs := qdranttest.Recorded[*qc.QueryPoints](f)
	if len(qs) != 1 || qs[0].GetReadConsistency().String() != majority.String() || qs[0].ShardKeySelector != nil {
		t.Errorf("query read consistency %v, want majority and no shard key", qs)
	}
	if sc := qdranttest.Recorded[*qc.ScrollPoints](f); len(sc) == 0 || sc[len(sc)-1].GetReadConsistency().String() != majority.String() {
		t.Errorf("scroll read consistency %v, want majority", sc)
	}

	// A collection without settings sends none: Qdrant's defaults hold.
	plain, err := Open(ctx, Config{Addr: addr, Collection: "plain", Dimension: dim, Embedder: "e", Create: true})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Search(ctx, vec(0, 0), 1, pipeline.Filter{}); err != nil {
		t.Fatal(err)
	}
	if p := qdranttest.Recorded[*qc.CreateCollection](f)[1]; p.ShardNumber != nil || p.ReplicationFactor != nil || p.WriteConsistencyFactor != nil ||
		p.OnDiskPayload != nil || p.GetVectorsConfig().GetParams().OnDisk != nil {
		t.Errorf("create without settings %v", p)
	}
	if q := qdranttest.Recorded[*qc.QueryPoints](f); q[len(q)-1].ReadConsistency != nil {
		t.Errorf("read consistency %v sent without --qdrant-read-consistency", q[len(q)-1].ReadConsistency)
	}

	// shard_number cannot change: an error naming it and both values.
	other := cfg
	other.Cluster.ShardNumber = 4
	_, err = Open(ctx, other)
	if pe := wantCode(t, err, CodeSettingsMismatch); !strings.Contains(pe.Message, "shard_number") || !strings.Contains(pe.Message, "has shard_number (--qdrant-shards) 3, configured 4") {
		t.Errorf("shard mismatch message %q", pe.Message)
	}
	other = cfg
	other.Cluster.TenantKey = "tenant"
	_, err = Open(ctx, other)
	if pe := wantCode(t, err, CodeSettingsMismatch); !strings.Contains(pe.Message, "sharding method auto, configured custom") {
		t.Errorf("sharding mismatch message %q", pe.Message)
	}

	// What Qdrant can change in place is a warning naming both values.
	var logs bytes.Buffer
	other = cfg
	other.Cluster = Cluster{ReplicationFactor: 3, WriteConsistencyFactor: 1}
	other.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	o, err := Open(ctx, other)
	if err != nil {
		t.Fatalf("a changeable setting refused the collection: %v", err)
	}
	o.Close()
	for _, want := range []string{"replication_factor (--qdrant-replication-factor) 2, configured 3", "write_consistency_factor (--qdrant-write-consistency-factor) 2, configured 1", "PATCH /collections/cl"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("warnings %q lack %q", logs.String(), want)
		}
	}
	other.Cluster = Cluster{OnDiskPayload: true, OnDiskVectors: true}
	logs.Reset()
	other.Collection = "plain"
	if o, err = Open(ctx, other); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if !strings.Contains(logs.String(), "on_disk_payload") || !strings.Contains(logs.String(), "on-disk vectors") {
		t.Errorf("on-disk warnings %q", logs.String())
	}
}

func TestParseReadConsistency(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"all": qc.NewReadConsistencyType(qc.ReadConsistencyType_All).String(), "Quorum": qc.NewReadConsistencyType(qc.ReadConsistencyType_Quorum).String(),
		"2": qc.NewReadConsistencyFactor(2).String(), "": (*qc.ReadConsistency)(nil).String(),
	} {
		rc, err := ParseReadConsistency(in)
		if err != nil || rc.String() != want {
			t.Errorf("ParseReadConsistency(%q) = %v, %v; want %s", in, rc, err, want)
		}
	}
	for _, bad := range []string{"0", "most", "-1", "1.5"} {
		if _, err := ParseReadConsistency(bad); err == nil || !strings.Contains(err.Error(), "--qdrant-read-consistency") || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseReadConsistency(%q) = %v, want an error naming the flag and the value", bad, err)
		}
	}
	for _, c := range []Cluster{{ShardNumber: -1}, {ReplicationFactor: 1, WriteConsistencyFactor: 2}, {TenantKey: "a.b"}, {ReadConsistency: "x"}} {
		if _, err := Open(context.Background(), Config{Addr: "127.0.0.1:1", Collection: "c", Dimension: dim, Embedder: "e", Cluster: c}); err == nil || !strings.Contains(err.Error(), "--qdrant-") {
			t.Errorf("Open with %+v: %v, want an error naming the flag", c, err)
		}
	}
}

func tenantDoc(id, tenant string, axis int) retrieval.Document {
	d := testDoc(id, id, "en", axis)
	if tenant != "" {
		for i := range d.Chunks {
			d.Chunks[i].Metadata["tenant"] = tenant
		}
	}
	return d
}

// TestQdrantTenantSharding checks custom sharding by tenant: each tenant's
// documents go to its own shard key (created on first write, by whichever
// replica writes first), a search fixed to a tenant is sent to its shards
// only, and a document moving tenant leaves no copy behind.
func TestQdrantTenantSharding(t *testing.T) {
	t.Parallel()
	f, addr := qdranttest.Start(t)
	ctx := context.Background()
	cfg := Config{Addr: addr, Collection: "tenants", Dimension: dim, Embedder: "e", Create: true, Cluster: Cluster{TenantKey: "tenant", ShardNumber: 2, ReplicationFactor: 2}}
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A second replica over the same collection.
	r2, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	for _, d := range []retrieval.Document{tenantDoc("a.md", "acme", 0), tenantDoc("g.md", "globex", 0), tenantDoc("s.md", "", 0)} {
		if err := s.ReplaceDocument(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := r2.ReplaceDocument(ctx, tenantDoc("a2.md", "acme", 1)); err != nil {
		t.Fatalf("the second replica writing to a shard key the first created: %v", err)
	}
	if c := qdranttest.Recorded[*qc.CreateCollection](f); len(c) != 1 || c[0].GetShardingMethod() != qc.ShardingMethod_Custom || c[0].GetShardNumber() != 2 {
		t.Errorf("create %v: want custom sharding, 2 shards per key", c)
	}
	var keys []string
	for _, r := range qdranttest.Recorded[*qc.CreateShardKeyRequest](f) {
		keys = append(keys, r.GetRequest().GetShardKey().GetKeyword())
		if r.GetRequest().GetShardsNumber() != 2 || r.GetRequest().GetReplicationFactor() != 2 {
			t.Errorf("shard key request %v", r)
		}
	}
	if !slices.Equal(keys, []string{"acme", "globex", SharedShardKey, "acme"}) {
		t.Errorf("shard keys created %v", keys)
	}
	for _, b := range qdranttest.Recorded[*qc.UpdateBatchPoints](f) {
		up := b.GetOperations()[0].GetUpsert()
		tenant := up.GetPoints()[0].GetPayload()["metadata"].GetStructValue().GetFields()["tenant"].GetStringValue()
		if want := cmp.Or(tenant, SharedShardKey); up.GetShardKeySelector().GetShardKeys()[0].GetKeyword() != want || up.GetPoints()[0].GetPayload()[KeyShard].GetStringValue() != want {
			t.Errorf("upsert of tenant %q went to %v", tenant, up.GetShardKeySelector())
		}
	}

	acme := pipeline.Filter{Metadata: map[string]string{"tenant": "acme"}}
	hits, err := s.Search(ctx, vec(0, 0), 10, acme)
	if err != nil || !slices.Equal(ids(hits), []string{"a.md#0", "a2.md#0"}) {
		t.Errorf("acme's search: %v, %v", ids(hits), err)
	}
	q := qdranttest.Recorded[*qc.QueryPoints](f)
	if sel := q[len(q)-1].GetShardKeySelector().GetShardKeys(); len(sel) != 1 || sel[0].GetKeyword() != "acme" {
		t.Errorf("acme's search sent shard keys %v", sel)
	}
	if hits, err := s.Search(ctx, vec(0, 0), 10, pipeline.Filter{}); err != nil || len(hits) != 4 {
		t.Errorf("search of every shard: %v, %v", ids(hits), err)
	}
	if hits, err := s.Search(ctx, vec(0, 0), 10, pipeline.Filter{Metadata: map[string]string{"tenant": "initech"}}); err != nil || len(hits) != 0 {
		t.Errorf("a tenant without documents: %v, %v; want no hits and no error", ids(hits), err)
	}

	// a.md moves to globex: acme no longer finds it.
	if err := r2.ReplaceDocument(ctx, tenantDoc("a.md", "globex", 0)); err != nil {
		t.Fatal(err)
	}
	if hits, err := s.Search(ctx, vec(0, 0), 10, acme); err != nil || !slices.Equal(ids(hits), []string{"a2.md#0"}) {
		t.Errorf("acme after a.md moved: %v, %v", ids(hits), err)
	}
	if docs, err := s.Documents(ctx); err != nil || len(docs) != 4 {
		t.Errorf("documents %v, %v", docs, err)
	}

	// The same collection without the tenant key is refused.
	plain := cfg
	plain.Cluster = Cluster{}
	_, err = Open(ctx, plain)
	if pe := wantCode(t, err, CodeSettingsMismatch); !strings.Contains(pe.Hint, "--qdrant-tenant-key") {
		t.Errorf("hint %q", pe.Hint)
	}
}
