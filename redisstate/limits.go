package redisstate

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"ragtime/admission"
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

// lease is one member held in each of keys (an ask's leases, taken at
// once), renewed until released.
type lease struct {
	keys   []string
	member string
}

// Lease takes one of limit leases on key, shared by every replica: it
// returns the func that gives it back, or nil when all limit are held.
// The lease is renewed while held and expires LeaseTTL after its replica
// stops renewing it (a replica that died). One round trip.
func (s *Store) Lease(ctx context.Context, key string, limit int) (release func(), err error) {
	if err := s.ready(ConcernLeases); err != nil {
		return nil, err
	}
	l := &lease{keys: []string{s.key("lease", key)}, member: s.member + ":" + strconv.FormatUint(s.leaseSeq.Add(1), 36)}
	ok, err := acquire.Run(ctx, s.rdb, l.keys, l.member, limit, s.opts.LeaseTTL.Milliseconds()).Int()
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
	_ = s.done(ctx, ConcernLeases, s.rdb.ZRem(ctx, l.keys[0], l.member).Err())
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
			for _, key := range l.keys {
				keys = append(keys, key)
				args = append(args, l.member)
			}
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

// admit is an ask's whole admission in one script: first the releases of
// asks that ended since the last call (their members of KEYS[2+n..],
// ARGV[5+n..]), then an ask from the GCRA bucket KEYS[1] (as gcra; none
// when ARGV[1], the emission interval, is 0), then one lease of each of
// the n = ARGV[5] keys KEYS[2..1+n] (as acquire), all or none. ARGV: the
// interval (µs per ask), the burst, the member, the leases' TTL in ms, n,
// then each lease's limit, then the released members. Returns {0, µs until
// an ask would be taken, 0} when the bucket is empty (nothing taken), {1,
// 0, i} when lease i (1-based) is all held (the ask taken from the bucket,
// no lease), {1, 0, 0} when everything was taken.
var admit = redis.NewScript(admitSrc)

const admitSrc = `
local n = tonumber(ARGV[5])
for i = 2 + n, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[4 + i])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
if interval > 0 then
  local burst = tonumber(ARGV[2])
  local tat = tonumber(redis.call('GET', KEYS[1]) or now)
  if tat < now then tat = now end
  local allow_at = tat + interval - interval * burst
  if allow_at > now then
    return {0, allow_at - now, 0}
  end
  local new_tat = tat + interval
  redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
end
local now_ms = math.floor(now / 1000)
local ttl = tonumber(ARGV[4])
for i = 2, 1 + n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now_ms)
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[4 + i]) then
    return {1, 0, i - 1}
  end
end
for i = 2, 1 + n do
  redis.call('ZADD', KEYS[i], now_ms + ttl, ARGV[3])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return {1, 0, 0}
`

// releaseDelay bounds how long a released lease waits to be given back
// with the next ask's admission (one round trip for both) before it is
// sent on its own.
const releaseDelay = 100 * time.Millisecond

// Admit implements admission.Shared: the ask's take from its bucket and
// its leases in one round trip (EVALSHA of one script), where Take and a
// Lease per key took one each. The leases are renewed while held; Release
// hands them to the next Admit's round trip, or, when none comes within
// releaseDelay, to one of their own.
func (s *Store) Admit(ctx context.Context, ask admission.SharedAsk) (admission.SharedGrant, error) {
	concern := ConcernRate
	if ask.Rate.N <= 0 || ask.Rate.Per <= 0 {
		concern = ConcernLeases
	}
	if err := s.ready(concern); err != nil {
		return admission.SharedGrant{}, err
	}
	var interval int64
	if ask.Rate.N > 0 && ask.Rate.Per > 0 {
		interval = max(1, int64(math.Round(float64(ask.Rate.Per.Microseconds())/float64(ask.Rate.N))))
	}
	released := s.takeReleased()
	member := s.member + ":" + strconv.FormatUint(s.leaseSeq.Add(1), 36)
	keys := make([]string, 1, 1+len(ask.Leases)+len(released))
	keys[0] = s.key("rate", ask.RateKey)
	args := make([]any, 5, 5+len(ask.Leases)+len(released))
	args[0], args[1], args[2], args[3], args[4] = interval, max(1, ask.Burst), member, s.opts.LeaseTTL.Milliseconds(), len(ask.Leases)
	for _, l := range ask.Leases {
		keys = append(keys, s.key("lease", l.Key))
		args = append(args, l.Limit)
	}
	for _, l := range released {
		for _, key := range l.keys {
			keys = append(keys, key)
			args = append(args, l.member)
		}
	}
	res, err := s.scripts.eval3(ctx, admit, admitSrc, keys, args)
	// Releases that Redis was not told of expire after LeaseTTL.
	if err = s.done(ctx, concern, err); err != nil {
		return admission.SharedGrant{}, err
	}
	switch {
	case res[0] == 0:
		return admission.SharedGrant{Retry: max(time.Microsecond, time.Duration(res[1])*time.Microsecond), Full: -1}, nil
	case res[2] > 0:
		return admission.SharedGrant{Full: int(res[2] - 1)}, nil
	}
	if len(ask.Leases) == 0 {
		return admission.SharedGrant{Full: -1}, nil
	}
	held := &lease{keys: keys[1 : 1+len(ask.Leases) : 1+len(ask.Leases)], member: member}
	s.leases.Store(held, struct{}{})
	return admission.SharedGrant{Full: -1, Release: func() { s.releaseLater(held) }}, nil
}

// releaseLater stops renewing l and queues it to be given back with the
// next Admit, or by flushReleased once the oldest queued release has waited
// releaseDelay. One timer serves every release: reset here when the queue
// was taken or sent, stopped when an Admit takes the queue (left to fire
// between asks, it would wake the idle process once an ask at paces under
// releaseDelay).
func (s *Store) releaseLater(l *lease) {
	if _, held := s.leases.LoadAndDelete(l); !held {
		return
	}
	s.relMu.Lock()
	defer s.relMu.Unlock()
	if len(s.released) == 0 {
		s.relSince = time.Now()
	}
	s.released = append(s.released, l)
	if !s.relArmed {
		s.relArmed = true
		if s.relTimer == nil {
			s.relTimer = time.AfterFunc(releaseDelay, s.flushQueued)
		} else {
			s.relTimer.Reset(releaseDelay)
		}
	}
}

// takeReleased takes the queued releases, for the caller to send, and
// stops the release timer.
func (s *Store) takeReleased() []*lease {
	s.relMu.Lock()
	defer s.relMu.Unlock()
	ls := s.released
	s.released = nil
	if s.relArmed {
		s.relTimer.Stop()
		s.relArmed = false
	}
	return ls
}

// flushQueued is the release timer: it sends the queue once its oldest
// release has waited releaseDelay, else (a release queued as an Admit
// stopped the timer too late) waits the rest.
func (s *Store) flushQueued() {
	s.relMu.Lock()
	if len(s.released) > 0 {
		if wait := releaseDelay - time.Since(s.relSince); wait > 0 {
			s.relTimer.Reset(wait)
			s.relMu.Unlock()
			return
		}
	}
	s.relArmed = false
	s.relMu.Unlock()
	s.flushReleased()
}

// flushReleased gives back the queued releases in one round trip; those
// Redis cannot be told of expire after LeaseTTL.
func (s *Store) flushReleased() {
	ls := s.takeReleased()
	if len(ls) == 0 || s.ready(ConcernLeases) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, l := range ls {
		for _, key := range l.keys {
			pipe.ZRem(ctx, key, l.member)
		}
	}
	_, err := pipe.Exec(ctx)
	_ = s.done(ctx, ConcernLeases, err)
}
