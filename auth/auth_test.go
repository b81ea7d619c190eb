package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"ragtime/pipeline"
)

func newKey(t testing.TB, kind Kind, scopes ...Scope) (Key, string) {
	t.Helper()
	token, prefix, hash, err := NewToken(kind)
	if err != nil {
		t.Fatal(err)
	}
	return Key{ID: "id-" + prefix, Name: "k", Kind: kind, Prefix: prefix, Hash: hash, Scopes: scopes}, token
}

func TestTokenShape(t *testing.T) {
	t.Parallel()
	for _, kind := range []Kind{Secret, Publishable} {
		token, prefix, hash, err := NewToken(kind)
		if err != nil {
			t.Fatal(err)
		}
		if len(token) != TokenLen || !strings.HasPrefix(token, prefix+"_") || !LooksLikePrefix(prefix) {
			t.Errorf("%s token %q (prefix %q) has the wrong shape", kind, token, prefix)
		}
		if KindOfPrefix(prefix) != kind {
			t.Errorf("KindOfPrefix(%q) = %s, want %s", prefix, KindOfPrefix(prefix), kind)
		}
		if p, ok := splitToken(token); !ok || p != prefix {
			t.Errorf("splitToken(%q) = %q, %v", token, p, ok)
		}
		if hash != HashToken(token) {
			t.Error("the returned hash is not the token's SHA-256")
		}
	}
	a, _, _, _ := NewToken(Secret)
	b, _, _, _ := NewToken(Secret)
	if a == b {
		t.Error("two tokens are equal")
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	good, goodTok := newKey(t, Secret, ScopeAsk)
	revoked, revokedTok := newKey(t, Secret, ScopeAsk)
	revoked.RevokedAt = now.Add(-time.Minute)
	expired, expiredTok := newKey(t, Secret, ScopeAsk)
	expired.ExpiresAt = now.Add(-time.Second)
	_, unknownTok := newKey(t, Secret, ScopeAsk)

	r := NewKeyring()
	if _, err := r.Authenticate(goodTok, now); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("before loading: %v, want ErrUnavailable", err)
	}
	if !r.Enabled() {
		t.Error("a keyring not loaded yet must require keys (fail closed)")
	}
	r.Set([]Key{good, revoked, expired})
	wrongSecret := goodTok[:len(goodTok)-4] + "AAAA"
	if wrongSecret == goodTok {
		wrongSecret = goodTok[:len(goodTok)-4] + "BBBB"
	}
	tests := []struct {
		token string
		want  error
	}{
		{goodTok, nil},
		{revokedTok, ErrRevoked},
		{expiredTok, ErrExpired},
		{unknownTok, ErrInvalid},
		{wrongSecret, ErrInvalid},
		{"rt_sk_short", ErrInvalid},
		{"Bearer " + goodTok, ErrInvalid},
		{"", ErrInvalid},
	}
	for _, tt := range tests {
		k, err := r.Authenticate(tt.token, now)
		if !errors.Is(err, tt.want) || (tt.want == nil && k.ID != good.ID) {
			t.Errorf("Authenticate(%.12s…) = %v, %v; want %v", tt.token, k, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), tt.token) && tt.token != "" {
			t.Errorf("the error %q holds the token", err)
		}
	}
	if used := r.used[good.ID]; !used.Equal(now) {
		t.Errorf("last use %v, want %v", used, now)
	}
	r.Set(nil)
	if r.Enabled() {
		t.Error("a loaded keyring without keys must not require keys")
	}
}

func TestAuthorize(t *testing.T) {
	t.Parallel()
	ask, _ := newKey(t, Secret, ScopeAsk, ScopeRead)
	admin, _ := newKey(t, Secret, ScopeAdmin)
	pub, _ := newKey(t, Publishable, ScopeAsk)
	pub.Origins = []string{"https://app.example.com"}
	tests := []struct {
		name   string
		c      Caller
		scope  Scope
		origin string
		want   error
	}{
		{"open", Caller{Open: true}, ScopeAdmin, "", nil},
		{"no key", Caller{}, ScopeAsk, "", ErrMissing},
		{"scope held", Caller{Key: &ask}, ScopeRead, "", nil},
		{"scope lacking", Caller{Key: &ask}, ScopeDocuments, "", ErrScope},
		{"admin implies all", Caller{Key: &admin}, ScopeDocuments, "", nil},
		{"publishable from its origin", Caller{Key: &pub}, ScopeAsk, "https://APP.example.com", nil},
		{"publishable from another origin", Caller{Key: &pub}, ScopeAsk, "https://evil.example", ErrOrigin},
		{"publishable without Origin", Caller{Key: &pub}, ScopeAsk, "", ErrOrigin},
		{"publishable reading", Caller{Key: &pub}, ScopeRead, "https://app.example.com", ErrScope},
	}
	for _, tt := range tests {
		if err := tt.c.Authorize(tt.scope, tt.origin); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestCallerID(t *testing.T) {
	t.Parallel()
	sec, _ := newKey(t, Secret, ScopeAsk)
	pub, _ := newKey(t, Publishable, ScopeAsk)
	for _, tt := range []struct {
		c    Caller
		want string
	}{
		{Caller{IP: "192.0.2.1"}, "ip:192.0.2.1"},
		{Caller{IP: "192.0.2.1", Open: true}, "ip:192.0.2.1"},
		{Caller{IP: "192.0.2.1", Key: &sec}, "key:" + sec.ID},
		{Caller{IP: "192.0.2.1", Key: &pub}, "key:" + pub.ID + "@ip:192.0.2.1"},
	} {
		if got := tt.c.ID(); got != tt.want {
			t.Errorf("ID() = %q, want %q", got, tt.want)
		}
	}
}

func TestAllowModel(t *testing.T) {
	t.Parallel()
	k, _ := newKey(t, Secret, ScopeAsk)
	k.Models = []string{"small", "medium"}
	c := Caller{Key: &k}
	if err := c.AllowModel("", []string{"x"}); err != nil {
		t.Errorf("the default model: %v", err)
	}
	if err := c.AllowModel("small", nil); err != nil {
		t.Errorf("an allowed model: %v", err)
	}
	err := c.AllowModel("large", nil)
	if !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), "small, medium") {
		t.Errorf("a model outside the key's list: %v, want ErrModel naming small, medium", err)
	}
	if err := c.AllowModel("medium", []string{"small"}); !errors.Is(err, ErrModel) {
		t.Errorf("a model outside the server's list: %v", err)
	}
	if err := (Caller{Open: true}).AllowModel("any", nil); err != nil {
		t.Errorf("no list at all: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	base := func() Key { return Key{Name: "n", Kind: Secret, Scopes: []Scope{ScopeAsk}} }
	tests := []struct {
		name string
		mod  func(*Key)
		want string
	}{
		{"fine", func(*Key) {}, ""},
		{"no name", func(k *Key) { k.Name = " " }, "--name"},
		{"publishable without origins", func(k *Key) { k.Kind = Publishable }, "--origins"},
		{"publishable reading", func(k *Key) {
			k.Kind, k.Origins, k.Scopes = Publishable, []string{"https://a.example"}, []Scope{ScopeAsk, ScopeRead}
		}, "only have --scopes ask"},
		{"origin without scheme", func(k *Key) { k.Origins = []string{"app.example.com"} }, "scheme://host"},
		{"origin with path", func(k *Key) { k.Origins = []string{"https://app.example.com/x"} }, "no path"},
		{"tenant with documents", func(k *Key) {
			k.Scopes, k.Filter = []Scope{ScopeAsk, ScopeDocuments}, pipeline.Filter{DocIDs: []string{"a"}}
		}, "tenant"},
	}
	for _, tt := range tests {
		k := base()
		tt.mod(&k)
		err := k.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestParseRateAndScopes(t *testing.T) {
	t.Parallel()
	if r, err := ParseRate("60/min"); err != nil || r != (Rate{60, time.Minute}) || r.String() != "60/min" {
		t.Errorf("ParseRate(60/min) = %v, %v", r, err)
	}
	for _, bad := range []string{"60", "0/min", "x/min", "5/fortnight"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
	if s, err := ParseScopes("ask, READ,ask"); err != nil || len(s) != 2 {
		t.Errorf("ParseScopes = %v, %v", s, err)
	}
	if _, err := ParseScopes("ask,write"); err == nil || !strings.Contains(err.Error(), "write") {
		t.Errorf("ParseScopes(write) = %v", err)
	}
}

// BenchmarkAuthenticateFailure compares a wrong secret for a known prefix
// with an unknown prefix: the two must cost the same (one SHA-256, one map
// lookup, one constant-time comparison). The two alternate in one loop so
// that the machine's load changes both alike; each path's mean is reported
// as known-ns/op and unknown-ns/op (the clock readings cost both the same).
func BenchmarkAuthenticateFailure(b *testing.B) {
	r := NewKeyring()
	var keys []Key
	var known string
	for i := range 1000 {
		k, tok := newKey(b, Secret, ScopeAsk)
		keys = append(keys, k)
		if i == 0 {
			known = tok
		}
	}
	r.Set(keys)
	_, unknown := newKey(b, Secret, ScopeAsk)
	wrong := known[:len(known)-4] + "AAAA"
	now := time.Now()
	var tKnown, tUnknown time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		_, _ = r.Authenticate(wrong, now)
		t1 := time.Now()
		_, _ = r.Authenticate(unknown, now)
		t2 := time.Now()
		tKnown += t1.Sub(t0)
		tUnknown += t2.Sub(t1)
		n++
	}
	b.ReportMetric(float64(tKnown.Nanoseconds())/float64(n), "known-ns/op")
	b.ReportMetric(float64(tUnknown.Nanoseconds())/float64(n), "unknown-ns/op")
}

func TestSnapshotKeepsRevocationsAndVersionTracksChanges(t *testing.T) {
	t.Parallel()
	k, tok := newKey(t, Secret, ScopeAsk)
	r := NewKeyring()
	r.Set([]Key{k})
	v1 := r.version()
	used := k
	used.LastUsedAt = time.Now()
	r.Set([]Key{used})
	if r.version() != v1 {
		t.Error("a new last use changed the version (the snapshot would be rewritten on every use)")
	}
	k.RevokedAt = time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	r.Set([]Key{k})
	if r.version() == v1 {
		t.Error("revoking a key did not change the version")
	}
	path := t.TempDir() + "/keys.json"
	if err := r.SaveSnapshot(path); err != nil {
		t.Fatal(err)
	}
	back := NewKeyring()
	if _, err := back.LoadSnapshot(path); err != nil {
		t.Fatal(err)
	}
	if _, err := back.Authenticate(tok, time.Now()); !errors.Is(err, ErrRevoked) {
		t.Errorf("a key revoked before the snapshot: %v, want ErrRevoked", err)
	}
	if back.version() != r.version() {
		t.Error("the snapshot does not round-trip")
	}
}
