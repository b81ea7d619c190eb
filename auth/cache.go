package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// CachedStore is a Store that keeps a copy of the keys it last loaded in a
// file and answers from that copy when the Store behind it fails, so that a
// server started while PostgreSQL is away still checks keys instead of
// refusing every request. The copy holds what PostgreSQL holds (the
// tokens' SHA-256, never a token) and is written 0600, atomically. What it
// cannot see: a key created or revoked while PostgreSQL is away (nobody
// can do that then) or while no server ran; the next successful load
// replaces it. Saving is best effort: a copy that cannot be written only
// means the next start without PostgreSQL fails closed.
type CachedStore struct {
	Store Store
	// Path is the copy's file.
	Path string
}

// keysCopy is the file's content.
type keysCopy struct {
	SavedAt time.Time `json:"saved_at"`
	Keys    []Key     `json:"keys"`
}

// LoadKeys loads from the Store and saves the copy; when the Store fails,
// it returns the copy, or the Store's error when there is none.
func (c CachedStore) LoadKeys(ctx context.Context) ([]Key, error) {
	keys, err := c.Store.LoadKeys(ctx)
	if err == nil {
		_ = c.save(keys)
		return keys, nil
	}
	b, rerr := os.ReadFile(c.Path)
	if rerr != nil {
		return nil, err
	}
	var kc keysCopy
	if jerr := json.Unmarshal(b, &kc); jerr != nil || kc.Keys == nil {
		return nil, errors.Join(err, fmt.Errorf("the copy of the keys in %s is unreadable", c.Path))
	}
	return kc.Keys, nil
}

// MarkUsed passes through to the Store.
func (c CachedStore) MarkUsed(ctx context.Context, used map[string]time.Time) error {
	return c.Store.MarkUsed(ctx, used)
}

// save writes the copy: a temp file in the same directory, fsynced, renamed.
func (c CachedStore) save(keys []Key) error {
	if keys == nil {
		keys = []Key{}
	}
	b, err := json.Marshal(keysCopy{SavedAt: time.Now().UTC(), Keys: keys})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.Path), filepath.Base(c.Path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), c.Path)
}
