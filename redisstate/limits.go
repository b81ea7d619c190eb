package redisstate

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"ragtime/auth"
)

// gcra is the generic cell rate algorithm on one key, the same bucket as
// admission's per-replica one (r refilled continuously, burst asks at
// once): the key holds the theoretical arrival time (TAT) of the next ask,
// in microseconds of Redis's clock, and expires when the bucket is full
// again. ARGV: the emission interval (µs per ask), the burst. Returns
// {1, 0} when the ask is taken, {0, µs until one would be} when not.
var gcra = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allow_at = tat + interval - interval * burst
if allow_at > now then
  return {0, allow_at - now}
end
local new_tat = tat + interval
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
`)

// Take takes one ask from the shared bucket key, refilled at r with room
// for burst asks: it returns 0 when the ask is taken, else how long until
// one would be. One round trip (EVALSHA of the GCRA script).
func (s *Store) Take(ctx context.Context, key string, r auth.Rate, burst int) (time.Duration, error) {
	if err := s.ready(ConcernRate); err != nil {
		return 0, err
	}
	if r.N <= 0 || r.Per <= 0 {
		return 0, nil
	}
	interval := max(1, int64(math.Round(float64(r.Per.Microseconds())/float64(r.N))))
	res, err := gcra.Run(ctx, s.rdb, []string{s.key("rate", key)}, interval, max(1, burst)).Int64Slice()
	if err = s.done(ctx, ConcernRate, err); err != nil {
		return 0, err
	}
	if len(res) == 2 && res[0] == 1 {
		return 0, nil
	}
	if len(res) != 2 {
		return 0, s.done(ctx, ConcernRate, errBadReply)
	}
	return time.Duration(res[1]) * time.Microsecond, nil
}

type replyError string

func (e replyError) Error() string { return string(e) }

const errBadReply = replyError("unexpected reply from the rate script")

// acquire takes one of limit leases of a key (a sorted set of members
// scored by their expiry, in ms of Redis's clock): expired members are
// dropped first, so a dead replica's leases free themselves. ARGV: the
// member, the limit, the TTL in ms. Returns 1 when taken, 0 when full.
var acquire = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
`)

// renew moves held members' expiry: ARGV[1] the TTL in ms, then members;
// KEYS the members' keys, one per member.
var renew = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i, k in ipairs(KEYS) do
  redis.call('ZADD', k, 'XX', now + ttl, ARGV[i + 1])
  redis.call('PEXPIRE', k, ttl)
end
return 0
`)

// lease is one held lease, renewed until released.
type lease struct {
	key, member string
}

// Lease takes one of limit leases on key, shared by every replica: it
// returns the func that gives it back, or nil when all limit are held.
// The lease is renewed while held and expires LeaseTTL after its replica
// stops renewing it (a replica that died). One round trip.
func (s *Store) Lease(ctx context.Context, key string, limit int) (release func(), err error) {
	if err := s.ready(ConcernLeases); err != nil {
		return nil, err
	}
	l := &lease{key: s.key("lease", key), member: s.member + ":" + strconv.FormatUint(s.leaseSeq.Add(1), 36)}
	ok, err := acquire.Run(ctx, s.rdb, []string{l.key}, l.member, limit, s.opts.LeaseTTL.Milliseconds()).Int()
	if err = s.done(ctx, ConcernLeases, err); err != nil {
		return nil, err
	}
	if ok != 1 {
		return nil, nil
	}
	s.leases.Store(l, struct{}{})
	return func() { s.release(l) }, nil
}

// release gives l back; when Redis cannot be told, the lease expires
// after LeaseTTL.
func (s *Store) release(l *lease) {
	if _, held := s.leases.LoadAndDelete(l); !held {
		return
	}
	if s.ready(ConcernLeases) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	_ = s.done(ctx, ConcernLeases, s.rdb.ZRem(ctx, l.key, l.member).Err())
}

// renewLeases renews every held lease each third of LeaseTTL, in one
// script call, until Close.
func (s *Store) renewLeases() {
	t := time.NewTicker(s.opts.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		var keys []string
		args := []any{s.opts.LeaseTTL.Milliseconds()}
		s.leases.Range(func(k, _ any) bool {
			l := k.(*lease)
			keys = append(keys, l.key)
			args = append(args, l.member)
			return true
		})
		if len(keys) == 0 || !s.Available() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
		_ = s.done(ctx, ConcernLeases, renew.Run(ctx, s.rdb, keys, args...).Err())
		cancel()
	}
}
