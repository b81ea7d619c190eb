package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Why a key check failed. The api answers each with its own status, code
// and hint (401 for the first four, 403 for the rest); their messages never
// hold the token.
var (
	// ErrMissing: auth is on and the request carries no key.
	ErrMissing = errors.New("this server requires an API key")
	// ErrInvalid: the key is malformed, unknown or wrong.
	ErrInvalid = errors.New("the API key is not valid")
	// ErrRevoked: the key was revoked.
	ErrRevoked = errors.New("the API key was revoked")
	// ErrExpired: the key's expiry has passed.
	ErrExpired = errors.New("the API key has expired")
	// ErrScope: the key lacks the scope the endpoint needs.
	ErrScope = errors.New("the API key lacks the scope this endpoint needs")
	// ErrOrigin: a publishable key used from an origin it does not list.
	ErrOrigin = errors.New("the API key may not be used from this origin")
	// ErrModel: the model asked for is not allowed to the caller.
	ErrModel = errors.New("the model is not allowed")
	// ErrUnavailable: the keys could not be loaded yet, so no key can be
	// checked (the server fails closed).
	ErrUnavailable = errors.New("the API keys could not be loaded from Postgres yet")
)

// Store is where keys live; postgres.Keys implements it.
type Store interface {
	// LoadKeys returns every key, revoked and expired ones included.
	LoadKeys(ctx context.Context) ([]Key, error)
	// MarkUsed records when each key (by id) was last used.
	MarkUsed(ctx context.Context, used map[string]time.Time) error
}

// Keyring holds every key in memory for the request path. Safe for
// concurrent use.
type Keyring struct {
	mu       sync.RWMutex
	byPrefix map[string]*Key
	loaded   bool
	sum      [32]byte // XOR of the keys' stateOf: see version
	// dummy is compared against when the prefix is unknown, so an unknown
	// prefix costs what a wrong secret for a known one costs.
	dummy [32]byte

	usedMu sync.Mutex
	used   map[string]time.Time
}

// NewKeyring returns an empty keyring that has not been loaded: until Set
// (or Load) is called, Enabled is true and every check fails with
// ErrUnavailable, so a server whose keys cannot be read fails closed.
func NewKeyring() *Keyring {
	r := &Keyring{byPrefix: map[string]*Key{}, used: map[string]time.Time{}}
	_, _ = rand.Read(r.dummy[:])
	return r
}

// Set replaces the keys held.
func (r *Keyring) Set(keys []Key) {
	m := make(map[string]*Key, len(keys))
	var sum [32]byte
	for i := range keys {
		k := keys[i]
		k.LastUsedAt = time.Time{} // not part of what the keyring decides on
		m[k.Prefix] = &k
		for j, b := range stateOf(k) {
			sum[j] ^= b
		}
	}
	r.mu.Lock()
	r.byPrefix, r.loaded, r.sum = m, true, sum
	r.mu.Unlock()
}

// stateOf digests what of a key decides a check (not its last use).
func stateOf(k Key) [32]byte {
	b, _ := json.Marshal(k)
	return sha256.Sum256(b)
}

// version identifies the keys held: it changes when a key is added,
// revoked or changed.
func (r *Keyring) version() [32]byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.sum
}

// Loaded reports whether the keys were read at least once.
func (r *Keyring) Loaded() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.loaded
}

// Enabled reports whether requests need a key: once any key was created
// (revoked and expired ones count, so revoking the last key does not open
// the server), or while the keys are not loaded.
func (r *Keyring) Enabled() bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return !r.loaded || len(r.byPrefix) > 0
}

// Authenticate returns the key a token belongs to, or ErrUnavailable,
// ErrInvalid, ErrRevoked or ErrExpired. Whatever the token, it hashes it
// once and compares in constant time against the stored hash, or a dummy
// when the prefix is unknown or the token malformed.
func (r *Keyring) Authenticate(token string, now time.Time) (*Key, error) {
	prefix, wellFormed := splitToken(token)
	sum := HashToken(token)
	r.mu.RLock()
	k, loaded := r.byPrefix[prefix], r.loaded
	r.mu.RUnlock()
	want := &r.dummy
	if k != nil {
		want = &k.Hash
	}
	match := subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	switch {
	case !loaded:
		return nil, ErrUnavailable
	case !wellFormed || k == nil || !match:
		return nil, ErrInvalid
	case !k.RevokedAt.IsZero():
		return nil, fmt.Errorf("%w (key %s, %q, revoked %s)", ErrRevoked, k.Prefix, k.Name, k.RevokedAt.UTC().Format(time.RFC3339))
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return nil, fmt.Errorf("%w (key %s, %q, expired %s)", ErrExpired, k.Prefix, k.Name, k.ExpiresAt.UTC().Format(time.RFC3339))
	}
	r.usedMu.Lock()
	r.used[k.ID] = now
	r.usedMu.Unlock()
	return k, nil
}

// AllowsOrigin reports whether a live publishable key lists origin, so
// that browsers on it get CORS headers without --cors-origins.
func (r *Keyring) AllowsOrigin(origin string, now time.Time) bool {
	origin = NormalizeOrigin(origin)
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, k := range r.byPrefix {
		if k.Kind == Publishable && k.RevokedAt.IsZero() && (k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt)) &&
			slices.Contains(k.Origins, origin) {
			return true
		}
	}
	return false
}

// Load reads every key from st once.
func (r *Keyring) Load(ctx context.Context, st Store) error {
	keys, err := st.LoadKeys(ctx)
	if err != nil {
		return fmt.Errorf("loading API keys: %w", err)
	}
	r.Set(keys)
	return nil
}

// Sync keeps the keyring current until ctx ends: every interval it writes
// the last-use times gathered since the previous round and reloads the keys
// (so a key created or revoked by `ragtime keys` takes effect within an
// interval). While the store is away it keeps the keys it has and logs once.
//
// With a snapshot path it also keeps the keys in that file (SaveSnapshot)
// after the first load and each one that changed them.
func (r *Keyring) Sync(ctx context.Context, st Store, every time.Duration, snapshotPath string, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r.flushUsed(fctx, st)
			cancel()
			return
		case <-t.C:
		}
		r.flushUsed(ctx, st)
		before, wasLoaded := r.version(), r.Loaded()
		err := r.Load(ctx, st)
		if err == nil && snapshotPath != "" && (r.version() != before || !wasLoaded) {
			if serr := r.SaveSnapshot(snapshotPath); serr != nil {
				log.Warn("cannot save the API keys' snapshot", "err", serr)
			}
		}
		switch {
		case err != nil && !failing && ctx.Err() == nil && !wasLoaded:
			log.Warn("cannot read the API keys yet; every request gets 503 auth_unavailable until they load", "err", err)
			failing = true
		case err != nil && !failing && ctx.Err() == nil:
			log.Warn("cannot reload the API keys; using the ones loaded before", "err", err)
			failing = true
		case err == nil && !wasLoaded:
			log.Info("API keys loaded", "keys_on", r.Enabled())
			failing = false
		case err == nil && failing:
			log.Info("API keys reloaded again")
			failing = false
		}
	}
}

// flushUsed writes the last-use times gathered so far; on failure they are
// kept for the next round (a newer time wins).
func (r *Keyring) flushUsed(ctx context.Context, st Store) {
	r.usedMu.Lock()
	used := r.used
	r.used = map[string]time.Time{}
	r.usedMu.Unlock()
	if len(used) == 0 {
		return
	}
	if err := st.MarkUsed(ctx, used); err != nil {
		r.usedMu.Lock()
		for id, t := range used {
			if t.After(r.used[id]) {
				r.used[id] = t
			}
		}
		r.usedMu.Unlock()
	}
}

// A snapshot is the keys as last loaded, kept in a file (hashes, never
// tokens; mode 0600) so that a serve restarted while Postgres is away still
// checks keys — and still refuses revoked ones it knew of — instead of
// failing open or refusing everyone.
type snapshot struct {
	SavedAt time.Time `json:"saved_at"`
	Keys    []Key     `json:"keys"`
}

// SaveSnapshot writes the keys held to path atomically (temp file, fsync,
// rename).
func (r *Keyring) SaveSnapshot(path string) error {
	r.mu.RLock()
	snap := snapshot{SavedAt: time.Now().UTC(), Keys: make([]Key, 0, len(r.byPrefix))}
	for _, k := range r.byPrefix {
		snap.Keys = append(snap.Keys, *k)
	}
	loaded := r.loaded
	r.mu.RUnlock()
	if !loaded {
		return errors.New("saving the API keys' snapshot: no keys loaded yet")
	}
	b, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encoding the API keys' snapshot: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keys-*.tmp")
	if err != nil {
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("saving the API keys' snapshot: %w", err)
	}
	return nil
}

// LoadSnapshot sets the keys from a file SaveSnapshot wrote and returns
// when it was saved; an error wrapping fs.ErrNotExist when there is none.
func (r *Keyring) LoadSnapshot(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, fmt.Errorf("reading the API keys' snapshot: %w", err)
	}
	var snap snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return time.Time{}, fmt.Errorf("reading the API keys' snapshot %s: %w", path, err)
	}
	r.Set(snap.Keys)
	return snap.SavedAt, nil
}
