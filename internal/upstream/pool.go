package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"ragtime/internal/rxstamp"
)

// Options tunes a Pool.
type Options struct {
	// IdlePerHost is how many idle keep-alive connections are kept per
	// upstream host: at least the calls that may be in flight to it at
	// once (serve's --max-concurrent streams and its ingests' embedding
	// batches), so that every call that ends leaves its connection for the
	// next instead of closing it (a socket in TIME_WAIT per call beyond
	// the limit). 0 means no limit: the idle pool then holds at most as
	// many connections as were ever in flight at once, each closed after
	// 90 s unused.
	IdlePerHost int
}

// Pool hands out Clients that share one tuned transport per upstream host
// (scheme, host and port), so the LLM, the embedder and the reranker on the
// same server draw from one keep-alive pool. It is safe for concurrent use.
type Pool struct {
	idle  int
	mu    sync.Mutex
	hosts map[string]*Client
}

// NewPool returns an empty Pool.
func NewPool(o Options) *Pool {
	if o.IdlePerHost <= 0 {
		// net/http reads 0 as 2 per host; no limit is the largest one.
		o.IdlePerHost = math.MaxInt
	}
	return &Pool{idle: o.IdlePerHost, hosts: map[string]*Client{}}
}

var defaultPool = sync.OnceValue(func() *Pool { return NewPool(Options{}) })

// Default is the process-wide Pool used when a caller is given none.
func Default() *Pool { return defaultPool() }

// Client returns the Client for base's host, creating its transports on
// first use. base must be an absolute http(s) URL; its path is ignored.
func (p *Pool) Client(base string) *Client {
	key := base
	if u, err := url.Parse(base); err == nil {
		key = u.Scheme + "://" + u.Host
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.hosts[key]; ok {
		return c
	}
	c := &Client{}
	c.warm = newWarmer(base, func(ctx context.Context, network, addr string) (*conn, error) {
		nc, err := p.dialer().DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return c.warm.adopt(newConn(nc)), nil
	})
	c.pooled, c.fresh = &http.Client{Transport: p.transport(c.warm)}, &http.Client{Transport: p.transport(nil)}
	p.hosts[key] = c
	return c
}

func (p *Pool) dialer() *net.Dialer {
	return &net.Dialer{
		Timeout:   10 * time.Second,
		KeepAlive: 30 * time.Second,
	}
}

// transport is the keep-alive transport of one host, which takes w's
// prewarmed connections before it dials (or, w nil, one that opens a new
// connection per request: the retry after a stale one).
func (p *Pool) transport(w *warmer) *http.Transport {
	dialer := p.dialer()
	single := w == nil
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if c := w.take(ctx, addr); c != nil {
				return c, nil
			}
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if w != nil {
				return w.adopt(newConn(c)), nil
			}
			return newConn(c), nil
		},
		ForceAttemptHTTP2:     true,
		DisableKeepAlives:     single,
		MaxIdleConns:          0, // no limit over hosts: a transport serves one host
		MaxIdleConnsPerHost:   p.idle,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Every open stream holds one connection, and its two buffers for
		// as long as the connection lives, so they are 1 KB rather than the
		// transport's 4 KB: a request is written in as many system calls
		// (past the buffer, the rest of a body goes out in one write),
		// and a streamed answer's chunks, a few hundred bytes each, are
		// read one per call as they come; larger reads bypass the buffer.
		WriteBufferSize: 1 << 10,
		ReadBufferSize:  1 << 10,
	}
}

// conn is an upstream connection. Its reads take the kernel's receive
// stamps where it gives them (package rxstamp), so that a call's first
// response byte and a stream's chunks are timed when they reached the
// socket, not when ragtime's goroutine got to read them (received). Its
// ReadFrom, the way the transport writes the part of a request body that
// does not fit its write buffer, copies through a pooled buffer: a
// *net.TCPConn's falls back to io.Copy for a body that is not a file or a
// socket, and io.Copy allocated a buffer of the rest's size (up to 32 KB)
// per request: a chat request's prompt, every ask.
type conn struct {
	net.Conn
	rx   *rxstamp.Reader // nil: reads are not stamped
	last rxstamp.At      // the latest read's stamp; zero: none
	warm warmState       // prewarming's (prewarm.go)
}

func newConn(c net.Conn) *conn { return &conn{Conn: c, rx: rxstamp.Enable(c)} }

// Read reads, stamped where the kernel stamps.
func (c *conn) Read(p []byte) (int, error) {
	if c.rx == nil {
		return c.Conn.Read(p)
	}
	n, at, err := c.rx.Read(p)
	if n > 0 {
		c.last.Store(at) // a read the kernel did not stamp clears it: no stamp, not an older read's
	}
	return n, err
}

// received is when the bytes of the latest read reached the socket (the
// zero time when the kernel did not say, or for no connection).
func (c *conn) received() time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.last.Load()
}

// copyBufs are conn.ReadFrom's buffers.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom writes what it reads from r until EOF.
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{c.Conn}, r, *bp)
}

// Client sends requests to one upstream host. The zero value is not usable;
// get one from a Pool, or wrap an *http.Client with FromHTTP.
type Client struct {
	pooled *http.Client
	fresh  *http.Client
	warm   *warmer // nil: not prewarmed (Prewarm)
}

// FromHTTP wraps hc (tests, or a caller with its own transport); the retry
// after a stale connection goes through hc too.
func FromHTTP(hc *http.Client) *Client { return &Client{pooled: hc, fresh: hc} }

// CloseIdleConnections closes the idle connections of this host.
func (c *Client) CloseIdleConnections() { c.pooled.CloseIdleConnections() }

// Do sends req, timing it into tr (nil: not timed). When the request fails
// on a reused keep-alive connection before any response byte came back —
// the server had closed the connection, so nothing reached it — it is sent
// once more on a fresh connection (tr then reports FreshRetry). This is not
// a retry of the call: a request that got any answer is never sent again.
// A request with a body is retried only if req.GetBody can rewind it
// (http.NewRequest sets it for bytes and strings readers).
func (c *Client) Do(req *http.Request, tr *Trace) (*http.Response, error) {
	if tr == nil {
		tr = &Trace{}
	}
	ctx := req.Context()
	inject(ctx, req)
	resp, err := c.pooled.Do(req.WithContext(httptrace.WithClientTrace(tr.warmContext(ctx), tr.hooks())))
	if err == nil || ctx.Err() != nil || !tr.staleFailure() || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
		return resp, err
	}
	again := req.Clone(ctx)
	if req.GetBody != nil {
		body, berr := req.GetBody()
		if berr != nil {
			return resp, err
		}
		again.Body = body
	}
	tr.restart(true)
	return c.fresh.Do(again.WithContext(httptrace.WithClientTrace(ctx, tr.hooks())))
}

// Backoff of DoIdempotent: short, because embed and rerank sit on the
// request path, and bounded by the caller's context.
const (
	idemBase     = 25 * time.Millisecond
	idemCap      = time.Second
	idemMaxAfter = 2 * time.Second
)

// DoIdempotent sends an idempotent request (an embedding, a rerank), trying
// it up to retries more times when it could not be sent or was answered
// 429, 502, 503 or 504, after a jittered backoff (at least Retry-After, up
// to 2 s). It returns the last response or error and how many retries it
// made. Timeouts and cancellations of ctx are not retried.
func (c *Client) DoIdempotent(req *http.Request, tr *Trace, retries int) (resp *http.Response, made int, err error) {
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		r := req
		if attempt > 0 {
			r = req.Clone(ctx)
			if req.GetBody != nil {
				if r.Body, err = req.GetBody(); err != nil {
					return nil, attempt, fmt.Errorf("rewinding the request body: %w", err)
				}
			}
		}
		if attempt > 0 && tr != nil {
			tr.restart(false)
		}
		resp, err = c.Do(r, tr)
		if attempt >= retries || ctx.Err() != nil || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			return resp, attempt, err
		}
		var after time.Duration
		switch {
		case err != nil:
			var ne net.Error
			if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
				return resp, attempt, err
			}
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
			resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
			after, _, _ = RetryAfter(resp.Header)
			if after > idemMaxAfter {
				return resp, attempt, nil
			}
			_, _ = ReadLimited(resp.Body, 64<<10)
			resp.Body.Close()
		default:
			return resp, attempt, nil
		}
		d := min(idemBase<<attempt, idemCap)
		d = max(d/2+rand.N(d/2+1), after)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, attempt, ctx.Err()
		case <-t.C:
		}
	}
}

// RetryAfter reads h's Retry-After header (RFC 9110 §10.2.3): a number of
// seconds, or an HTTP date. wait is how long it asks for, never negative;
// at is the date it named (zero when it gave seconds); ok is false when the
// header is absent or unreadable. Every reader of the header (the retries
// here, the model clients' errors, api.Client's admission waits) goes
// through it.
func RetryAfter(h http.Header) (wait time.Duration, at time.Time, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, time.Time{}, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 && secs < math.MaxInt64/float64(time.Second) {
		return time.Duration(secs * float64(time.Second)), time.Time{}, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), t, true
	}
	return 0, time.Time{}, false
}

// inject adds the W3C trace context of ctx (traceparent, tracestate) to the
// request's headers, so that a model server, embedder or reranker with
// tracing on joins the query's trace. It uses OpenTelemetry's global
// propagator, which tracing.Setup installs; without a trace in ctx (tracing
// off) it does nothing.
func inject(ctx context.Context, req *http.Request) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	if req.Header == nil {
		req.Header = http.Header{}
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
}
