package qdrant

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	qc "github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"ragtime"
)

// SharedShardKey is the shard key of documents without a tenant when the
// collection is sharded by tenant (Cluster.TenantKey).
const SharedShardKey = "shared"

// Cluster is how a collection is spread over a Qdrant cluster. Zero values
// leave Qdrant's defaults (one shard, one replica, vectors and payload in
// memory, majority-free reads from one replica).
//
// Which settings are checked against an existing collection, and how:
// shard_number and the sharding method cannot be changed once a collection
// exists, so a difference is an error (store_settings_mismatch) naming the
// setting and both values; replication_factor, write_consistency_factor and
// on-disk vectors/payload can be changed in place (PATCH
// /collections/NAME), which moves data, so a difference is logged as a
// warning and left to the operator. A setting left at its zero value is not
// checked.
type Cluster struct {
	// ShardNumber is shard_number (0: Qdrant's default, 1). With tenant
	// sharding it is the number of shards per tenant's shard key.
	ShardNumber int
	// ReplicationFactor is replication_factor: copies of each shard (0:
	// Qdrant's default, 1).
	ReplicationFactor int
	// WriteConsistencyFactor is write_consistency_factor: replicas that must
	// acknowledge a write (0: Qdrant's default, 1).
	WriteConsistencyFactor int
	// OnDiskVectors keeps the original vectors on disk (memory-mapped).
	OnDiskVectors bool
	// OnDiskPayload keeps payloads on disk.
	OnDiskPayload bool
	// ReadConsistency is sent with every read: "" (Qdrant's default: one
	// replica), "all", "majority", "quorum" or a number of replicas.
	ReadConsistency string
	// TenantKey, when set, shards the collection by tenant (Qdrant's custom
	// sharding): a document's metadata value under this key is its shard
	// key (documents without one go to SharedShardKey), and a search whose
	// filter (an API key's --filter, or the ask's own) fixes that key is
	// sent to that tenant's shards only.
	TenantKey string
}

// Validate names the setting that is out of range.
func (c Cluster) Validate() error {
	switch {
	case c.ShardNumber < 0:
		return fmt.Errorf("--qdrant-shards must not be negative, got %d", c.ShardNumber)
	case c.ReplicationFactor < 0:
		return fmt.Errorf("--qdrant-replication-factor must not be negative, got %d", c.ReplicationFactor)
	case c.WriteConsistencyFactor < 0:
		return fmt.Errorf("--qdrant-write-consistency-factor must not be negative, got %d", c.WriteConsistencyFactor)
	case c.ReplicationFactor > 0 && c.WriteConsistencyFactor > c.ReplicationFactor:
		return fmt.Errorf("--qdrant-write-consistency-factor %d is more than --qdrant-replication-factor %d: no write could ever be acknowledged",
			c.WriteConsistencyFactor, c.ReplicationFactor)
	case strings.ContainsAny(c.TenantKey, ". "):
		return fmt.Errorf("--qdrant-tenant-key %q must be a plain metadata key (no dots or spaces)", c.TenantKey)
	}
	if _, err := ParseReadConsistency(c.ReadConsistency); err != nil {
		return err
	}
	return nil
}

// ParseReadConsistency reads --qdrant-read-consistency: "" (Qdrant's
// default), all, majority, quorum, or a whole number of replicas ≥ 1.
func ParseReadConsistency(s string) (*qc.ReadConsistency, error) {
	switch v := strings.ToLower(strings.TrimSpace(s)); v {
	case "":
		return nil, nil
	case "all":
		return qc.NewReadConsistencyType(qc.ReadConsistencyType_All), nil
	case "majority":
		return qc.NewReadConsistencyType(qc.ReadConsistencyType_Majority), nil
	case "quorum":
		return qc.NewReadConsistencyType(qc.ReadConsistencyType_Quorum), nil
	default:
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--qdrant-read-consistency must be all, majority, quorum or a number of replicas ≥ 1, got %q", s)
		}
		return qc.NewReadConsistencyFactor(n), nil
	}
}

// readConsistency is the read_consistency of every read (validated by Open).
func (c Cluster) readConsistency() *qc.ReadConsistency {
	rc, _ := ParseReadConsistency(c.ReadConsistency)
	return rc
}

func (c Cluster) onDiskVectors() *bool {
	if !c.OnDiskVectors {
		return nil
	}
	return ptr(true)
}

// apply puts the settings into a new collection's request.
func (c Cluster) apply(req *qc.CreateCollection) {
	if c.ShardNumber > 0 {
		req.ShardNumber = ptr(uint32(c.ShardNumber))
	}
	if c.ReplicationFactor > 0 {
		req.ReplicationFactor = ptr(uint32(c.ReplicationFactor))
	}
	if c.WriteConsistencyFactor > 0 {
		req.WriteConsistencyFactor = ptr(uint32(c.WriteConsistencyFactor))
	}
	if c.OnDiskPayload {
		req.OnDiskPayload = ptr(true)
	}
	if c.TenantKey != "" {
		req.ShardingMethod = qc.ShardingMethod_Custom.Enum()
	}
}

// tenantOf is the tenant named by meta under the tenant key ("" when the
// collection is not sharded by tenant or meta does not name one).
func (c Cluster) tenantOf(meta map[string]string) string {
	if c.TenantKey == "" {
		return ""
	}
	return meta[c.TenantKey]
}

// shardKeyOf is the shard key a document of tenant goes to: the tenant,
// SharedShardKey without one, "" when the collection is not sharded by
// tenant.
func (c Cluster) shardKeyOf(tenant string) string {
	switch {
	case c.TenantKey == "":
		return ""
	case tenant == "":
		return SharedShardKey
	}
	return tenant
}

func shardSelector(key string) *qc.ShardKeySelector {
	return &qc.ShardKeySelector{ShardKeys: []*qc.ShardKey{qc.NewShardKey(key)}}
}

// isMissingShardKey reports Qdrant's answer to a request naming a shard key
// nobody created yet: for a search, the tenant simply has no documents.
func isMissingShardKey(err error) bool {
	st, _ := status.FromError(err)
	msg := strings.ToLower(st.Message())
	return strings.Contains(msg, "shard key") && (strings.Contains(msg, "not found") || strings.Contains(msg, "does not exist") || strings.Contains(msg, "doesn't exist"))
}

// ensureShardKey creates key's shards the first time this process writes
// to it. Another replica creating it first is fine (AlreadyExists).
func (s *Store) ensureShardKey(ctx context.Context, key string) error {
	s.shardMu.Lock()
	defer s.shardMu.Unlock()
	if s.shardKeys[key] {
		return nil
	}
	cctx, cancel := s.call(ctx)
	defer cancel()
	req := &qc.CreateShardKey{ShardKey: qc.NewShardKey(key)}
	if s.cfg.Cluster.ShardNumber > 0 {
		req.ShardsNumber = ptr(uint32(s.cfg.Cluster.ShardNumber))
	}
	if s.cfg.Cluster.ReplicationFactor > 0 {
		req.ReplicationFactor = ptr(uint32(s.cfg.Cluster.ReplicationFactor))
	}
	err := s.client.CreateShardKey(cctx, s.cfg.Collection, req)
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return s.classify(ctx, "creating shard key "+strconv.Quote(key), err)
	}
	s.shardKeys[key] = true
	return nil
}

// checkCluster compares the configured settings with an existing
// collection's: the ones Qdrant cannot change are errors, the others
// warnings (see Cluster).
func (s *Store) checkCluster(info *qc.CollectionInfo) error {
	p := info.GetConfig().GetParams()
	want := s.cfg.Cluster
	custom := p.GetShardingMethod() == qc.ShardingMethod_Custom
	switch {
	case want.TenantKey != "" && !custom:
		return s.settingsMismatch("sharding method", "custom (--qdrant-tenant-key "+want.TenantKey+")", "auto",
			"a collection's sharding method is fixed when it is created: drop --qdrant-tenant-key, or use another --qdrant-collection and re-ingest")
	case want.TenantKey == "" && custom:
		return s.settingsMismatch("sharding method", "auto", "custom (sharded by tenant)",
			"set --qdrant-tenant-key to the metadata key its documents were sharded by")
	case want.ShardNumber > 0 && p.GetShardNumber() != 0 && int(p.GetShardNumber()) != want.ShardNumber:
		return s.settingsMismatch("shard_number (--qdrant-shards)", strconv.Itoa(want.ShardNumber), strconv.Itoa(int(p.GetShardNumber())),
			"a collection's shard count is fixed when it is created: set --qdrant-shards to the collection's, or use another --qdrant-collection and re-ingest")
	}
	warn := func(setting string, want, have any) {
		if s.cfg.Logger == nil {
			return
		}
		s.cfg.Logger.Warn(fmt.Sprintf("qdrant collection %q has %s %v, configured %v: keeping the collection's; change it with PATCH /collections/%s (Qdrant moves the data) or set the flag to match",
			s.cfg.Collection, setting, have, want, s.cfg.Collection), "setting", setting, "configured", want, "collection", have)
	}
	if want.ReplicationFactor > 0 && p.ReplicationFactor != nil && int(p.GetReplicationFactor()) != want.ReplicationFactor {
		warn("replication_factor (--qdrant-replication-factor)", want.ReplicationFactor, p.GetReplicationFactor())
	}
	if want.WriteConsistencyFactor > 0 && p.WriteConsistencyFactor != nil && int(p.GetWriteConsistencyFactor()) != want.WriteConsistencyFactor {
		warn("write_consistency_factor (--qdrant-write-consistency-factor)", want.WriteConsistencyFactor, p.GetWriteConsistencyFactor())
	}
	if want.OnDiskPayload && !p.GetOnDiskPayload() {
		warn("on_disk_payload (--qdrant-on-disk-payload)", true, false)
	}
	if want.OnDiskVectors && !p.GetVectorsConfig().GetParams().GetOnDisk() {
		warn("on-disk vectors (--qdrant-on-disk-vectors)", true, false)
	}
	return nil
}

func (s *Store) settingsMismatch(setting, want, have, hint string) error {
	return &ragtime.Error{Kind: ragtime.KindUpstreamRejected, Code: CodeSettingsMismatch,
		Message: fmt.Sprintf("qdrant collection %q has %s %s, configured %s", s.cfg.Collection, setting, have, want),
		Hint:    hint}
}
