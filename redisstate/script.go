package redisstate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptConns run the admission script (an ask's one round trip) on
// connections of their own, each a socket and a preformatted command
// buffer: per round trip one deadline, one write and the reads of a
// three-integer reply. Through the client the same call also checked the
// connection's health with a syscall on every checkout, set two deadlines,
// built and parsed generic command values and ran its hooks and
// push-notification checks: about a quarter of the CPU the round trip
// added to an ask on loopback (BenchmarkAdmitPaced). The connections use
// the client's dialer (TLS for rediss://) and its URL's credentials and
// database; at most the client's PoolSize are in use at once (and 16 more
// idle), and an ask finding them all busy waits for one within the
// timeout, as the client's pool did.
type scriptConns struct {
	opt     *redis.Options
	timeout time.Duration
	inUse   chan struct{} // a token per connection in use, PoolSize at most
	mu      sync.Mutex
	idle    []*scriptConn
	closed  bool
}

func newScriptConns(opt *redis.Options, timeout time.Duration) *scriptConns {
	return &scriptConns{opt: opt, timeout: timeout, inUse: make(chan struct{}, max(1, opt.PoolSize))}
}

// maxIdleScriptConns bounds the connections kept between asks; asks beyond
// them at once dial, and close theirs after.
const maxIdleScriptConns = 16

// errScriptConnsBusy is an ask that found every connection busy for the
// whole timeout.
var errScriptConnsBusy = errors.New("redis: every admission connection busy for the round trip timeout")

type scriptConn struct {
	c   net.Conn
	rd  *bufio.Reader
	buf []byte
}

// errRedisReply is an error reply from Redis (other than NOSCRIPT).
type errRedisReply string

func (e errRedisReply) Error() string { return "redis: " + string(e) }

func (p *scriptConns) get(ctx context.Context) (*scriptConn, error) {
	select {
	case p.inUse <- struct{}{}:
	default:
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		select {
		case p.inUse <- struct{}{}:
		case <-t.C:
			return nil, errScriptConnsBusy
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.inUse
		return nil, redis.ErrClosed
	}
	if n := len(p.idle); n > 0 {
		sc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return sc, nil
	}
	p.mu.Unlock()
	sc, err := p.dial(ctx)
	if err != nil {
		<-p.inUse
	}
	return sc, err
}

// put keeps sc for the next ask, or closes it when it failed (its reply
// may be half read), the pool is full or closed.
func (p *scriptConns) put(sc *scriptConn, healthy bool) {
	defer func() { <-p.inUse }()
	if healthy {
		p.mu.Lock()
		if !p.closed && len(p.idle) < maxIdleScriptConns {
			p.idle = append(p.idle, sc)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	sc.c.Close()
}

func (p *scriptConns) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, sc := range idle {
		sc.c.Close()
	}
}

// dial opens a connection as the client would: its dialer, then AUTH and
// SELECT when the URL asks for them (RESP2: the script's reply is the same).
func (p *scriptConns) dial(ctx context.Context) (*scriptConn, error) {
	dctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	c, err := p.opt.Dialer(dctx, p.opt.Network, p.opt.Addr)
	if err != nil {
		return nil, err
	}
	sc := &scriptConn{c: c, rd: bufio.NewReaderSize(c, 512), buf: make([]byte, 0, 512)}
	var init [][]string
	switch {
	case p.opt.Username != "":
		init = append(init, []string{"AUTH", p.opt.Username, p.opt.Password})
	case p.opt.Password != "":
		init = append(init, []string{"AUTH", p.opt.Password})
	}
	if p.opt.DB != 0 {
		init = append(init, []string{"SELECT", strconv.Itoa(p.opt.DB)})
	}
	if err := c.SetDeadline(time.Now().Add(p.timeout)); err != nil {
		c.Close()
		return nil, err
	}
	for _, cmd := range init {
		sc.buf = appendArrayLen(sc.buf[:0], len(cmd))
		for _, a := range cmd {
			sc.buf = appendBulk(sc.buf, a)
		}
		if _, err := c.Write(sc.buf); err != nil {
			c.Close()
			return nil, err
		}
		line, err := sc.line()
		if err == nil && (len(line) == 0 || line[0] != '+') {
			err = errRedisReply(strings.TrimPrefix(string(line), "-"))
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", cmd[0], err)
		}
	}
	return sc, nil
}

// eval3 runs the script (by its SHA1, loading it with EVAL when Redis
// does not know it) with keys and args (int64 or string), and returns its
// reply of three integers.
func (p *scriptConns) eval3(ctx context.Context, s *redis.Script, src string, keys []string, args []any) (res [3]int64, err error) {
	if err := ctx.Err(); err != nil {
		return res, err
	}
	sc, err := p.get(ctx)
	if err != nil {
		return res, err
	}
	deadline := time.Now().Add(p.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	healthy := false
	defer func() { p.put(sc, healthy) }()
	if err = sc.c.SetDeadline(deadline); err != nil {
		return res, err
	}
	res, err = sc.run(s.Hash(), "EVALSHA", keys, args)
	var reply errRedisReply
	if errors.As(err, &reply) && strings.HasPrefix(string(reply), "NOSCRIPT") {
		res, err = sc.run(src, "EVAL", keys, args)
	}
	// An error reply leaves the connection ready for the next ask; any
	// other failure may leave part of a reply unread, and closes it.
	healthy = err == nil || errors.As(err, &reply)
	return res, err
}

// run sends one EVAL or EVALSHA of script and reads its reply.
func (sc *scriptConn) run(script, verb string, keys []string, args []any) (res [3]int64, err error) {
	b := appendArrayLen(sc.buf[:0], 3+len(keys)+len(args))
	b = appendBulk(b, verb)
	b = appendBulk(b, script)
	b = appendBulkInt(b, int64(len(keys)))
	for _, k := range keys {
		b = appendBulk(b, k)
	}
	for _, a := range args {
		switch v := a.(type) {
		case int64:
			b = appendBulkInt(b, v)
		case int:
			b = appendBulkInt(b, int64(v))
		case string:
			b = appendBulk(b, v)
		default:
			return res, fmt.Errorf("redisstate: script argument of type %T", a)
		}
	}
	sc.buf = b
	if _, err := sc.c.Write(b); err != nil {
		return res, err
	}
	line, err := sc.line()
	if err != nil {
		return res, err
	}
	switch {
	case len(line) > 0 && line[0] == '-':
		return res, errRedisReply(line[1:])
	case string(line) != "*3":
		return res, errBadReply // the connection is closed: what is left of the reply is not read
	}
	bad := false
	for i := range res {
		line, err := sc.line()
		if err != nil {
			return res, err
		}
		n, perr := strconv.ParseInt(string(line[min(1, len(line)):]), 10, 64)
		if len(line) == 0 || line[0] != ':' || perr != nil {
			bad = true
		}
		res[i] = n
	}
	if bad {
		return res, errBadReply // read whole, but closed all the same
	}
	return res, nil
}

// line reads one reply line, without its CRLF; valid until the next read.
func (sc *scriptConn) line() ([]byte, error) {
	line, err := sc.rd.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, errBadReply
	}
	return line[:len(line)-2], nil
}

func appendArrayLen(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

func appendBulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}

func appendBulkInt(b []byte, n int64) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], n, 10)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, '\r', '\n')
	b = append(b, s...)
	return append(b, '\r', '\n')
}
