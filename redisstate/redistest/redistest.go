// Package redistest gives tests a real Redis: the server REDIS_URL names
// (default redis://127.0.0.1:6379/0), a key prefix of their own so that
// parallel tests share nothing, and its keys deleted afterwards.
// postgrestest.Proxy, a plain TCP proxy, cuts it from a process under test.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is the Redis tests use when REDIS_URL is unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns REDIS_URL, or DefaultURL when it is unset, after checking
// that it answers: a test needing Redis fails with advice when it does
// not, never skips (scripts/ensure-redis.sh starts the local one).
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		u = DefaultURL
	}
	opts, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("REDIS_URL: %v", err)
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("Redis at %s does not answer (%v): start it (scripts/ensure-redis.sh, or redis-server) or set REDIS_URL", opts.Addr, err)
	}
	return u
}

// Prefix returns a key prefix unique to the test; t.Cleanup deletes every
// key under it from the Redis at url.
func Prefix(t testing.TB, url string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "ragtime-test:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		opts, err := redis.ParseURL(url)
		if err != nil {
			return
		}
		c := redis.NewClient(opts)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
	})
	return prefix
}
