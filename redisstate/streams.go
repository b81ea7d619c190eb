package redisstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A running query's events go to the Redis Stream "<prefix>events:<query
// id>", in entries written by one writer per process: each entry holds the
// events one query sent since the writer's last round trip, as fields k
// (the key id that asked), s (the first event's sequence) and f (the
// events as framed for the client, one after the other; an event's frame
// ends with its only blank line, as its data is one line of JSON); the
// query's end is an entry with the field end. One field of bytes rather
// than a pair per event: an event then costs the asking goroutine an
// append, not three allocations. The stream is capped at
// about maxEntries entries (MAXLEN ~) and expires runningTTL after its last
// entry, endedTTL after its end: long enough for a follower on another
// replica to read the end.
const (
	maxEntries = 2000
	runningTTL = 5 * time.Minute
	endedTTL   = 30 * time.Second
	// followIdle is how long a follower waits for a query that sends
	// nothing (its replica died, or Redis lost its events) before it gives
	// up on it.
	followIdle = 2 * time.Minute
)

// ErrLost is returned by Resume when the followed stream stopped
// (expired, or silent for followIdle) before its end.
var ErrLost = errors.New("the query's shared event stream ended without its done event")

// publisher is the process's one stream writer: queries add framed events
// to their pending batches without waiting, and its goroutine sends every
// pending batch in one pipelined round trip, so that a process with many
// streams pays a round trip per batch of tokens, not per token.
type publisher struct {
	s       *Store
	mu      sync.Mutex
	pending map[*queryLog]struct{}
	kick    chan struct{}
}

// queryLog is one query's pending events: first is the first one's
// sequence, frames their frames one after the other.
type queryLog struct {
	key, keyID string
	first      int
	frames     []byte
	ended      bool
}

func newPublisher(s *Store) *publisher {
	return &publisher{s: s, pending: map[*queryLog]struct{}{}, kick: make(chan struct{}, 1)}
}

// Publish starts the shared log of query qid, asked with keyID ("" without
// a key): add sends event seq, framed as the client gets it, and end marks
// the query finished. Neither waits on Redis; events that cannot be sent
// (Redis unavailable) are dropped, and a follower elsewhere then sees the
// gap.
func (s *Store) Publish(qid, keyID string) (add func(seq int, frame []byte), end func()) {
	q := &queryLog{key: s.key("events", qid), keyID: keyID}
	p := s.streams
	add = func(seq int, frame []byte) {
		p.mu.Lock()
		if len(q.frames) == 0 {
			q.first = seq
		}
		q.frames = append(q.frames, frame...)
		p.pending[q] = struct{}{}
		p.mu.Unlock()
		p.wake()
	}
	end = func() {
		p.mu.Lock()
		q.ended = true
		p.pending[q] = struct{}{}
		p.mu.Unlock()
		p.wake()
	}
	return add, end
}

func (p *publisher) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run sends the pending batches until Close, then once more.
func (p *publisher) run() {
	for {
		select {
		case <-p.s.stop:
			p.flush()
			return
		case <-p.kick:
		}
		p.flush()
	}
}

// flush sends every pending batch in one pipeline.
func (p *publisher) flush() {
	p.mu.Lock()
	if len(p.pending) == 0 {
		p.mu.Unlock()
		return
	}
	type batch struct {
		key, keyID string
		first      int
		frames     string
		ended      bool
	}
	batches := make([]batch, 0, len(p.pending))
	for q := range p.pending {
		batches = append(batches, batch{q.key, q.keyID, q.first, string(q.frames), q.ended})
		q.frames = q.frames[:0]
		delete(p.pending, q)
	}
	p.mu.Unlock()
	if p.s.ready(ConcernStreams) != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.s.opts.Timeout)
	defer cancel()
	pipe := p.s.rdb.Pipeline()
	for _, b := range batches {
		if len(b.frames) > 0 {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.key, MaxLen: maxEntries, Approx: true,
				Values: []any{"k", b.keyID, "s", b.first, "f", b.frames}})
		}
		ttl := runningTTL
		if b.ended {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: b.key, MaxLen: maxEntries, Approx: true, Values: []any{"k", b.keyID, "end", "1"}})
			ttl = endedTTL
		}
		pipe.Expire(ctx, b.key, ttl)
	}
	_, err := pipe.Exec(ctx)
	_ = p.s.done(ctx, ConcernStreams, err)
}

// attachedKey marks a query followed on some replica.
func (s *Store) attachedKey(qid string) string { return s.key("attached", qid) }

// Attached reports whether a client follows query qid on some replica
// (Resume marks it while it runs): the replica running the query then
// keeps it running for a client that reconnected elsewhere.
func (s *Store) Attached(ctx context.Context, qid string) (bool, error) {
	if err := s.ready(ConcernStreams); err != nil {
		return false, err
	}
	n, err := s.rdb.Exists(ctx, s.attachedKey(qid)).Result()
	if err = s.done(ctx, ConcernStreams, err); err != nil {
		return false, err
	}
	return n == 1, nil
}

// Resume replays the events after sequence after of query qid, asked with
// keyID, from its shared stream and follows it live until its end, calling
// each with every event (its sequence and framing) in order, and with nil
// (seq -1) when there is nothing new: once when the query is found, then
// after each quiet wait of every (a heartbeat's chance). It reports found
// false, calling nothing, when the query is not running anywhere (no
// stream, a stream that already ended, another key's). While it follows,
// the query is marked attached, renewed every wait.
func (s *Store) Resume(ctx context.Context, qid, keyID string, after int, every time.Duration,
	each func(seq int, frame []byte) error) (found bool, err error) {
	if err := s.ready(ConcernStreams); err != nil {
		return false, err
	}
	key := s.key("events", qid)
	entries, err := s.rdb.XRange(ctx, key, "-", "+").Result()
	if err = s.done(ctx, ConcernStreams, err); err != nil {
		return false, err
	}
	if len(entries) == 0 || entries[0].Values["k"] != keyID {
		return false, nil
	}
	for _, e := range entries {
		if _, end := e.Values["end"]; end {
			return false, nil
		}
	}
	var marked time.Time
	mark := func() {
		marked = time.Now()
		_ = s.done(ctx, ConcernStreams, s.rdb.Set(ctx, s.attachedKey(qid), "1", 2*every+time.Second).Err())
	}
	mark()
	defer s.rdb.Del(context.WithoutCancel(ctx), s.attachedKey(qid))
	if err := each(-1, nil); err != nil {
		return true, err
	}
	last := "0"
	quiet := time.Now()
	for {
		for _, e := range entries {
			last = e.ID
			if _, end := e.Values["end"]; end {
				return true, nil
			}
			if err := replay(e, after, each); err != nil {
				return true, err
			}
		}
		if len(entries) > 0 {
			quiet = time.Now()
		} else if time.Since(quiet) > followIdle {
			return true, ErrLost
		}
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if time.Since(marked) >= every {
			mark()
		}
		// The read blocks past the client's timeout on purpose: a
		// blocking read is one round trip that waits.
		streams, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Block: every, Count: 256}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			entries = nil
			if err := each(-1, nil); err != nil {
				return true, err
			}
		case err != nil:
			return true, s.done(ctx, ConcernStreams, err)
		default:
			entries = streams[0].Messages
		}
	}
}

// replay calls each with entry e's events after sequence after, in order.
func replay(e redis.XMessage, after int, each func(int, []byte) error) error {
	first, _ := e.Values["s"].(string)
	seq, err := strconv.Atoi(first)
	frames, _ := e.Values["f"].(string)
	if err != nil || frames == "" {
		return nil
	}
	for rest := []byte(frames); len(rest) > 0; seq++ {
		i := bytes.Index(rest, []byte("\n\n"))
		if i < 0 {
			return fmt.Errorf("a partial event in the shared stream after event %d", seq-1)
		}
		frame := rest[:i+2]
		rest = rest[i+2:]
		if seq <= after {
			continue
		}
		if err := each(seq, frame); err != nil {
			return err
		}
	}
	return nil
}
