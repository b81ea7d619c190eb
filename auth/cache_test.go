package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// flakyStore is a Store whose LoadKeys fails while down is set.
type flakyStore struct {
	keys []Key
	down bool
}

func (f *flakyStore) LoadKeys(context.Context) ([]Key, error) {
	if f.down {
		return nil, errors.New("cannot reach PostgreSQL")
	}
	return f.keys, nil
}

func (f *flakyStore) MarkUsed(context.Context, map[string]time.Time) error { return nil }

// TestCachedStoreAnswersFromItsCopy: keys loaded once are answered from the
// file while the store fails; without a copy the store's error comes back
// (the keyring then fails closed). The copy holds no token.
func TestCachedStoreAnswersFromItsCopy(t *testing.T) {
	t.Parallel()
	k, token := newKey(t, Secret, ScopeAdmin)
	inner := &flakyStore{keys: []Key{k}, down: true}
	cs := CachedStore{Store: inner, Path: filepath.Join(t.TempDir(), "keys.cache")}
	if _, err := cs.LoadKeys(context.Background()); err == nil {
		t.Fatal("no copy yet and the store is down: want an error")
	}
	inner.down = false
	if keys, err := cs.LoadKeys(context.Background()); err != nil || len(keys) != 1 {
		t.Fatalf("LoadKeys = %v, %v", keys, err)
	}
	inner.down = true
	keys, err := cs.LoadKeys(context.Background())
	if err != nil || len(keys) != 1 || keys[0].Hash != k.Hash || keys[0].Prefix != k.Prefix {
		t.Fatalf("from the copy: %+v, %v", keys, err)
	}
	r := NewKeyring()
	if err := r.Load(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Authenticate(token, time.Now()); err != nil {
		t.Errorf("a key from the copy does not authenticate: %v", err)
	}
	b, err := os.ReadFile(cs.Path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), token[len(k.Prefix):]) {
		t.Error("the copy holds the token")
	}
	if fi, err := os.Stat(cs.Path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("copy mode %v (%v), want 0600", fi.Mode(), err)
	}
}
