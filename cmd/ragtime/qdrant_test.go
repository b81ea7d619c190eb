package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	qc "github.com/qdrant/go-client/qdrant"

	"ragtime/pipeline"
	"ragtime/retrieval/qdrant/qdranttest"
)

// TestQdrantStoreEndToEnd ingests into and asks from the in-process gRPC
// Qdrant, and checks the search stage's attrs and the error event of a
// missing collection.
func TestQdrantStoreEndToEnd(t *testing.T) {
	t.Parallel()
	q, addr := qdranttest.Start(t)
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	qflags := []string{"--store", "qdrant", "--qdrant-url", addr, "--qdrant-hnsw-ef", "48", "--qdrant-collection", "docs"}

	out := runCmd(t, env, append(append([]string{"ingest"}, qflags...), "testdata/corpus")...)
	if !strings.Contains(out, "ingested 4 documents") || !strings.Contains(out, "qdrant collection docs") {
		t.Fatalf("ingest: %s", out)
	}
	if cr := qdranttest.Recorded[*qc.CreateCollection](q); len(cr) != 1 || cr[0].GetVectorsConfig().GetParams().GetSize() != 512 {
		t.Fatalf("collection created %v", cr)
	}
	again := runCmd(t, env, append(append([]string{"ingest"}, qflags...), "testdata/corpus")...)
	if !strings.Contains(again, "4 unchanged") {
		t.Errorf("second ingest did not skip unchanged documents: %s", again)
	}

	// Its own --data-dir: serve keeps its spool and key snapshot there.
	srv := startServe(t, env, append(qflags, "--data-dir", t.TempDir())...)
	d := lastDone(t, ask(t, srv.url, "q=what+is+prefill&top_k=3&retrieval=vector"))
	var search map[string]any
	for _, s := range d.Stages {
		if s.Name == "search" {
			search = s.Attrs
		}
	}
	if search["store"] != "qdrant" || search["ef"] != float64(48) || search["hits"] != float64(3) || search["k"] != float64(3) {
		t.Errorf("search attrs %v", search)
	}
	// Collapsed by document (the default), the vector leg searches
	// max(top_k, 50) chunks deep to find top_k documents; collapse=none
	// asks Qdrant for top_k. The BM25 reranker then scores the candidates
	// with the collection's statistics: a query on the lexical sparse
	// vector restricted to their points.
	lastDense := func() *qc.QueryPoints {
		qs := qdranttest.Recorded[*qc.QueryPoints](q)
		for i := len(qs) - 1; i >= 0; i-- {
			if qs[i].GetQuery().GetNearest().GetDense() != nil {
				return qs[i]
			}
		}
		return nil
	}
	if qd := lastDense(); qd.GetLimit() != pipeline.DefaultLegK {
		t.Errorf("vector query %v", qd)
	}
	if qs := qdranttest.Recorded[*qc.QueryPoints](q); len(qs) == 0 || qs[len(qs)-1].GetUsing() != "lexical" ||
		len(qs[len(qs)-1].GetFilter().GetMust()) != 1 || len(qs[len(qs)-1].GetFilter().GetMust()[0].GetHasId().GetHasId()) != 3 {
		t.Errorf("the reranker's query %v: want the lexical leg over the 3 candidates' points", qs[len(qs)-1])
	}
	lastDone(t, ask(t, srv.url, "q=what+is+prefill&top_k=3&retrieval=vector&collapse=none"))
	if qd := lastDense(); qd.GetLimit() != 3 {
		t.Errorf("vector query with collapse=none %v", qd)
	}

	// Another collection that nobody ingested: the stream ends with an
	// error event carrying the code and the caller's hint; the log has
	// the operator's (Qdrant's address, ragtime ingest).
	other := startServe(t, env, "--store", "qdrant", "--qdrant-url", addr, "--qdrant-collection", "empty", "--data-dir", t.TempDir())
	events := ask(t, other.url, "q=prefill")
	last := events[len(events)-1]
	if last.Name != "error" || !strings.Contains(string(last.Data), "store_collection_missing") || !strings.Contains(string(last.Data), "POST /v1/documents") ||
		strings.Contains(string(last.Data), addr) {
		t.Errorf("missing collection: last event %s %s", last.Name, last.Data)
	}
	eventually(t, "the operator's hint in the log", func() bool {
		return strings.Contains(other.stderr.String(), "ragtime ingest --store qdrant") && strings.Contains(other.stderr.String(), addr)
	})
	// Still ready (degraded): behind a load balancer it must take the
	// first POST /v1/documents that creates the collection.
	if status, body := readyz(t, other.url); status != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, "POST /v1/documents") {
		t.Errorf("/readyz with the collection missing = %d %s, want 200 degraded naming what creates it", status, body)
	}
	if status, body := doJSON(t, "POST", other.url+"/v1/documents", "application/json", []byte(`{"id":"a.md","text":"Prefill reads the prompt."}`)); status != 200 {
		t.Fatalf("POST to create the collection: %d %v", status, body)
	}
	if status, body := readyz(t, other.url); status != 200 || strings.Contains(body, "degraded") {
		t.Errorf("/readyz after the first document = %d %s, want ready", status, body)
	}
}

// TestQdrantClusterSettingsFromConfig sets the cluster settings in a
// --config file's qdrant section (one overridden by a flag) and checks the
// CreateCollection request and the read consistency of serve's searches,
// then that a serve configured with another shard count refuses the
// collection by name, and that a bad value names its key.
func TestQdrantClusterSettingsFromConfig(t *testing.T) {
	t.Parallel()
	q, addr := qdranttest.Start(t)
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL, "RAGTIME_QDRANT_REPLICATION_FACTOR": "3"}
	dir := t.TempDir()
	conf := filepath.Join(dir, "ragtime.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
[qdrant]
url = %q
collection = "clustered"
shard_number = 6
replication_factor = 2
write_consistency_factor = 2
on_disk_vectors = true
on_disk_payload = true
read_consistency = "quorum"
`, addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runOut(t, env, "config", "--config", conf, "--store", "qdrant")
	if err != nil {
		t.Fatal(err)
	}
	for setting, w := range map[string][]string{"qdrant-shards": {"6", "file"}, "qdrant-replication-factor": {"3", "env"}, "qdrant-read-consistency": {"quorum", "file"}} {
		if row := configRow(t, out, setting); row[1] != w[0] || row[2] != w[1] {
			t.Errorf("%s = %v, want %s from %s", setting, row[1:], w[0], w[1])
		}
	}

	srv := startServe(t, env, "--config", conf, "--store", "qdrant", "--data-dir", t.TempDir(), "--qdrant-write-consistency-factor", "1")
	if status, body := doJSON(t, "POST", srv.url+"/v1/documents", "application/json", []byte(`{"id":"kv.md","text":"The KV cache keeps keys and values of past tokens."}`)); status != 200 {
		t.Fatalf("POST /v1/documents: %d %v", status, body)
	}
	lastDone(t, ask(t, srv.url, "q=what+does+the+kv+cache+keep"))
	cr := qdranttest.Recorded[*qc.CreateCollection](q)
	if len(cr) != 1 {
		t.Fatalf("%d CreateCollection requests", len(cr))
	}
	c := cr[0]
	if c.GetCollectionName() != "clustered" || c.GetShardNumber() != 6 || c.GetReplicationFactor() != 3 || c.GetWriteConsistencyFactor() != 1 ||
		!c.GetOnDiskPayload() || !c.GetVectorsConfig().GetParams().GetOnDisk() {
		t.Errorf("CreateCollection %v: want clustered, 6 shards, replication 3 (env over file), write consistency 1 (flag), on-disk vectors and payload", c)
	}
	// The default retrieval is hybrid: one QueryBatch.
	qs := qdranttest.Recorded[*qc.QueryBatchPoints](q)
	if len(qs) == 0 || qs[len(qs)-1].GetReadConsistency().GetType() != qc.ReadConsistencyType_Quorum {
		t.Errorf("search read consistency %v, want quorum", qs)
	}

	// The existing collection has 6 shards: a serve set to 4 does not
	// start, and says which setting differs with both values.
	var stdout, stderr syncBuffer
	err = run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--config", conf, "--store", "qdrant", "--data-dir", t.TempDir(), "--qdrant-shards", "4"}, envMap(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "store_settings_mismatch") || !strings.Contains(err.Error(), "shard_number (--qdrant-shards) 6, configured 4") {
		t.Errorf("serve over a 6-shard collection with --qdrant-shards 4: %v", err)
	}

	for _, b := range []struct{ body, want string }{
		{"[qdrant]\nshards = 3\n", "unknown key qdrant.shards"},
		{"[qdrant]\nread_consistency = 0\n", "qdrant.read_consistency"},
		{"[qdrant]\non_disk_payload = \"yes\"\n", "qdrant.on_disk_payload"},
		{"[qdrant]\napi_key = \"qk-secret-1234\"\n", "never read from a file"},
	} {
		path := filepath.Join(dir, "bad.toml")
		if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := runOut(t, nil, "config", "--config", path); err == nil || !strings.Contains(err.Error(), b.want) || strings.Contains(err.Error(), "qk-secret") {
			t.Errorf("%q: %v, want an error naming %s", b.body, err, b.want)
		}
	}
	err = run(context.Background(), []string{"serve", "--store", "qdrant", "--qdrant-url", addr, "--qdrant-read-consistency", "most"}, envMap(env), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--qdrant-read-consistency") {
		t.Errorf("serve with a bad read consistency: %v", err)
	}
}

// TestQdrantTenantKeyReadsOnlyItsShards runs serve over a collection
// sharded by tenant (--qdrant-tenant-key tenant): documents posted with
// metadata tenant=acme and tenant=globex go to their shard keys, an ask with
// a key whose --filter is metadata.tenant=acme is sent to acme's shards only
// and finds only acme's document, and the admin's ask reads every shard.
func TestQdrantTenantKeyReadsOnlyItsShards(t *testing.T) {
	t.Parallel()
	q, addr := qdranttest.Start(t)
	dbURL, _ := testDB(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	admin := createKey(t, env, "--name", "admin", "--scopes", "admin")
	acme := createKey(t, env, "--name", "acme", "--scopes", "ask", "--filter", "metadata.tenant=acme")
	srv := startServe(t, env, "--store", "qdrant", "--qdrant-url", addr, "--qdrant-collection", "tenants",
		"--qdrant-tenant-key", "tenant", "--data-dir", t.TempDir())
	for id, tenant := range map[string]string{"acme-kv.md": "acme", "globex-kv.md": "globex"} {
		body := fmt.Sprintf(`{"id":%q,"text":"The KV cache of %s keeps the keys and values of past tokens.","metadata":{"tenant":%q}}`, id, tenant, tenant)
		if status, _, out := call(t, "POST", srv.url+"/v1/documents", admin.token, strings.NewReader(body), map[string]string{"Content-Type": "application/json"}); status != 200 {
			t.Fatalf("POST %s: %d %s", id, status, out)
		}
	}
	var shardKeys []string
	for _, r := range qdranttest.Recorded[*qc.CreateShardKeyRequest](q) {
		shardKeys = append(shardKeys, r.GetRequest().GetShardKey().GetKeyword())
	}
	if len(shardKeys) != 2 {
		t.Errorf("shard keys created %v, want acme and globex", shardKeys)
	}

	if src := sourcesOf(t, askWith(t, srv.url, "/ask?q=what+does+the+kv+cache+keep&top_k=5", acme.token, nil)); len(src) != 1 || src[0] != "acme-kv.md" {
		t.Errorf("acme's ask found %v, want only acme-kv.md", src)
	}
	// The default retrieval is hybrid: one QueryBatch, each query of it
	// limited to the tenant's shard.
	qs := qdranttest.Recorded[*qc.QueryBatchPoints](q)
	for _, bq := range qs[len(qs)-1].GetQueryPoints() {
		if sel := bq.GetShardKeySelector().GetShardKeys(); len(sel) != 1 || sel[0].GetKeyword() != "acme" {
			t.Errorf("acme's search went to shard keys %v, want acme's only", sel)
		}
	}
	if src := sourcesOf(t, askWith(t, srv.url, "/ask?q=what+does+the+kv+cache+keep&top_k=5", admin.token, nil)); len(src) != 2 {
		t.Errorf("the admin's ask found %v, want both tenants' documents", src)
	}
	qs = qdranttest.Recorded[*qc.QueryBatchPoints](q)
	for _, bq := range qs[len(qs)-1].GetQueryPoints() {
		if bq.ShardKeySelector != nil {
			t.Errorf("the admin's search was limited to %v", bq.ShardKeySelector)
		}
	}
}
