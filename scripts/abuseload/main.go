// Command abuseload drives a running ragtime serve with the abuse mix of
// issue 10 next to one well-behaved client, on loopback only, for a bounded
// time with bounded connection counts, and prints what the well-behaved
// client saw: the TTFT of a steady ask every 200 ms, and /healthz latency.
// scripts/abuse-load.sh runs it twice (idle, then under abuse) against a
// fresh serve each time and adds the server's peak RSS.
//
// With -steady=false it runs only the abuse, so that the attacker and the
// measured client are separate processes, as they are separate machines in
// life (the script does so).
//
// The abuse, from its own loopback address (-abuse-from, one attacking
// host by default; the steady client and the health probe are 127.0.0.1):
//   - -nonreaders clients that send GET /ask and never read a byte, each
//     opening a new one every -reopen;
//   - -slowbodies clients that POST /ask a 1,000-byte body one byte every 5 s;
//   - -slowloris clients that send request headers one line every 5 s and
//     never finish them;
//   - -stallers clients that ask for a long answer (about 7 MB, more than
//     the socket buffers hold: see stallBody) and stop reading: serve's
//     --stream-write-timeout must cut them. Each reads nothing for
//     -stall-hold, then drains what was sent and counts the stream as cut
//     when it ends without its done event. When the cut came a client that
//     reads nothing cannot see; the script reads it from the queries serve
//     recorded (status cancelled, code client_stalled, e2e_ms).
//
// Every abusive connection is re-opened when the server cuts it, so the
// pressure stays constant for the whole run.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"ragtime/internal/sse"
)

type config struct {
	base        string
	duration    time.Duration
	steadyEvery time.Duration
	steadyMax   int
	nonreaders  int
	slowbodies  int
	slowloris   int
	stallers    int
	stallHold   time.Duration
	reopen      time.Duration
	abuseFrom   string
	abuseHosts  int
	label       string
	steady      bool
}

func main() {
	var c config
	flag.StringVar(&c.base, "url", "http://127.0.0.1:8080", "the serve to load (loopback only)")
	flag.DurationVar(&c.duration, "duration", 30*time.Second, "how long to run (at most 5m)")
	flag.DurationVar(&c.steadyEvery, "steady-every", 200*time.Millisecond, "interval of the steady client's asks")
	flag.IntVar(&c.steadyMax, "steady-max-tokens", 0, "max_tokens of the steady client's asks (0: serve's default)")
	flag.IntVar(&c.nonreaders, "nonreaders", 0, "clients that open /ask and never read (at most 5000)")
	flag.IntVar(&c.slowbodies, "slowbodies", 0, "clients that send a body one byte every 5 s (at most 5000)")
	flag.IntVar(&c.slowloris, "slowloris", 0, "clients that send headers one line every 5 s (at most 5000)")
	flag.IntVar(&c.stallers, "stallers", 0, "clients that ask for a long answer and stop reading (at most 5000)")
	flag.DurationVar(&c.stallHold, "stall-hold", 25*time.Second, "how long a staller reads nothing before it drains the stream (above 1.5 × serve's --stream-write-timeout)")
	flag.DurationVar(&c.reopen, "reopen", 5*time.Second, "a non-reader abandons its ask and opens a new one this often")
	flag.StringVar(&c.abuseFrom, "abuse-from", "127.0.0.2", "first loopback address the abusers connect from")
	flag.IntVar(&c.abuseHosts, "abuse-hosts", 1, "how many consecutive loopback addresses the abusers spread over")
	flag.StringVar(&c.label, "label", "run", "name printed with the results")
	flag.BoolVar(&c.steady, "steady", true, "run the steady client and the /healthz probe (false: only the abuse, e.g. from another process)")
	flag.Parse()
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "abuseload:", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "abuseload:", err)
		os.Exit(1)
	}
}

func (c *config) check() error {
	u, err := url.Parse(c.base)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-url must be a loopback address (127.0.0.1:port), got %q", c.base)
	}
	if a := net.ParseIP(c.abuseFrom); a == nil || !a.IsLoopback() || a.To4() == nil {
		return fmt.Errorf("-abuse-from must be an IPv4 loopback address, got %q", c.abuseFrom)
	}
	switch {
	case c.duration <= 0 || c.duration > 5*time.Minute:
		return fmt.Errorf("-duration must be within (0, 5m], got %s", c.duration)
	case c.nonreaders < 0 || c.nonreaders > 5000, c.slowbodies < 0 || c.slowbodies > 5000, c.slowloris < 0 || c.slowloris > 5000,
		c.stallers < 0 || c.stallers > 5000:
		return fmt.Errorf("each client count must be within [0, 5000]")
	case c.stallers > 0 && (c.stallHold <= 0 || c.stallHold >= c.duration):
		return fmt.Errorf("-stall-hold must be positive and below -duration (%s), got %s", c.duration, c.stallHold)
	case c.abuseHosts < 1 || c.abuseHosts > 250:
		return fmt.Errorf("-abuse-hosts must be within [1, 250]")
	case c.steadyMax < 0:
		return fmt.Errorf("-steady-max-tokens must be 0 or more, got %d", c.steadyMax)
	case c.steadyEvery < 10*time.Millisecond:
		return fmt.Errorf("-steady-every must be at least 10ms")
	}
	return nil
}

// abuseAddr is the i-th abuser's source address.
func (c *config) abuseAddr(i int) *net.TCPAddr {
	ip := net.ParseIP(c.abuseFrom).To4()
	next := make(net.IP, 4)
	copy(next, ip)
	next[3] += byte(i % c.abuseHosts)
	return &net.TCPAddr{IP: next}
}

type sample struct {
	ttft       time.Duration // client-side: request sent → first token event read
	serverTTFT float64       // the done event's ttft_ms
	status     int
	ok         bool
}

func run(c config) error {
	u, _ := url.Parse(c.base)
	host := u.Host
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()

	var wg sync.WaitGroup
	var abuse counters
	for i := range c.nonreaders {
		wg.Go(func() { c.nonreader(ctx, host, i, &abuse) })
	}
	for i := range c.slowbodies {
		wg.Go(func() { c.slowBody(ctx, host, c.nonreaders+i, &abuse) })
	}
	for i := range c.slowloris {
		wg.Go(func() { c.slowLoris(ctx, host, c.nonreaders+c.slowbodies+i, &abuse) })
	}
	var stalls stallCounts
	for i := range c.stallers {
		wg.Go(func() { c.staller(ctx, host, c.nonreaders+c.slowbodies+c.slowloris+i, &abuse, &stalls) })
	}

	if !c.steady {
		<-ctx.Done()
		wg.Wait()
		fmt.Printf("%s: abuse connections opened %d, dial errors %d, answers seen by status %s\n", c.label,
			abuse.opened.Load(), abuse.dialErr.Load(), abuse.statuses())
		stalls.print(c)
		return nil
	}
	// Let the abusers open their connections before measuring.
	if c.nonreaders+c.slowbodies+c.slowloris+c.stallers > 0 {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
		}
	}

	steady := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 60 * time.Second}
	probe := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var samples []sample
	var health []time.Duration
	var healthFail atomic.Int64
	var steadyWG sync.WaitGroup
	steadyWG.Go(func() {
		every(ctx, c.steadyEvery, func() {
			steadyWG.Go(func() {
				s := askOnce(c.base, steady, c.steadyMax)
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
			})
		})
	})
	steadyWG.Go(func() {
		every(ctx, 50*time.Millisecond, func() {
			start := time.Now()
			resp, err := probe.Get(c.base + "/healthz")
			if err != nil {
				healthFail.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				healthFail.Add(1)
				return
			}
			mu.Lock()
			health = append(health, time.Since(start))
			mu.Unlock()
		})
	})
	<-ctx.Done()
	steadyWG.Wait()
	wg.Wait()

	var client []time.Duration
	var server []float64
	failed := map[int]int{}
	for _, s := range samples {
		if !s.ok {
			failed[s.status]++
			continue
		}
		client = append(client, s.ttft)
		server = append(server, s.serverTTFT)
	}
	fmt.Printf("%s: steady asks %d ok, failed by status %v\n", c.label, len(client), failed)
	fmt.Printf("%s: steady TTFT (client) p50 %.1f ms p99 %.1f ms max %.1f ms\n", c.label,
		ms(pct(client, 0.50)), ms(pct(client, 0.99)), ms(pct(client, 1)))
	fmt.Printf("%s: steady TTFT (server ttft_ms) p50 %.1f ms p99 %.1f ms\n", c.label, pct(server, 0.50), pct(server, 0.99))
	fmt.Printf("%s: /healthz n %d p50 %.1f ms p99 %.1f ms max %.1f ms failed %d\n", c.label, len(health),
		ms(pct(health, 0.50)), ms(pct(health, 0.99)), ms(pct(health, 1)), healthFail.Load())
	if c.nonreaders+c.slowbodies+c.slowloris+c.stallers > 0 {
		fmt.Printf("%s: abuse connections opened %d, dial errors %d, answers seen by status %s\n", c.label,
			abuse.opened.Load(), abuse.dialErr.Load(), abuse.statuses())
	}
	stalls.print(c)
	return nil
}

// askOnce sends one GET /ask (with max_tokens when maxTokens > 0) and
// times its first token.
func askOnce(base string, c *http.Client, maxTokens int) sample {
	start := time.Now()
	u := base + "/ask?q=" + url.QueryEscape("what does a reused keep-alive connection skip?") + "&top_k=4"
	if maxTokens > 0 {
		u += "&max_tokens=" + strconv.Itoa(maxTokens)
	}
	resp, err := c.Get(u)
	if err != nil {
		return sample{}
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return sample{status: resp.StatusCode}
	}
	s := sample{status: 200}
	rd := sse.Reader{MaxLine: 4 << 20, Handle: func(event string, data []byte, at time.Time) (bool, error) {
		switch event {
		case "token":
			if s.ttft == 0 {
				s.ttft = at.Sub(start)
			}
		case "done":
			var d struct {
				TTFTMs float64 `json:"ttft_ms"`
			}
			if json.Unmarshal(data, &d) == nil {
				s.serverTTFT = d.TTFTMs
				s.ok = s.ttft > 0
			}
		}
		return false, nil
	}}
	_, _ = rd.Run(resp.Body) // a stream cut short has no done: s.ok stays false
	return s
}

type counters struct {
	opened, dialErr atomic.Int64
	mu              sync.Mutex
	byStatus        map[string]int
}

func (c *counters) saw(status string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byStatus == nil {
		c.byStatus = map[string]int{}
	}
	c.byStatus[status]++
}

func (c *counters) statuses() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.byStatus))
	for k := range c.byStatus {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s:%d ", k, c.byStatus[k])
	}
	return strings.TrimSpace(b.String())
}

// dial connects from the i-th abuser's address with a small receive
// buffer, so a client that does not read stops the server's writes soon.
func (c *config) dial(ctx context.Context, host string, i int, a *counters) (net.Conn, error) {
	d := net.Dialer{LocalAddr: c.abuseAddr(i), Timeout: 5 * time.Second,
		Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { setReceiveBuffer(fd, 4096) })
		}}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		if ctx.Err() == nil {
			a.dialErr.Add(1)
		}
		return nil, err
	}
	a.opened.Add(1)
	return conn, nil
}

// every calls fn each interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// nonreader sends GET /ask and never reads, opening a new one every reopen.
func (c *config) nonreader(ctx context.Context, host string, i int, a *counters) {
	sleep(ctx, time.Duration(i)*time.Millisecond) // ramp up over a second
	for ctx.Err() == nil {
		conn, err := c.dial(ctx, host, i, a)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		fmt.Fprintf(conn, "GET /ask?q=%s HTTP/1.1\r\nHost: %s\r\n\r\n", url.QueryEscape("what is prefill?"), host)
		sleep(ctx, c.reopen)
		conn.Close()
	}
}

// stallCounts sums up what the stallers saw when they drained their
// streams: cut (the stream ended without its done event), finished (the
// done event came: serve never had to wait on the client), refused (an
// answer other than 200) or still open when the run ended.
type stallCounts struct {
	asked, cut, finished, refused, open atomic.Int64
	bytes                               atomic.Int64 // read from cut streams
}

func (s *stallCounts) print(c config) {
	if c.stallers == 0 {
		return
	}
	cut := s.cut.Load()
	fmt.Printf("%s: stalled clients %d asked (reading nothing for %s): %d cut by serve, %d finished uncut, %d refused, %d still open; %.0f KB received per cut stream\n",
		c.label, s.asked.Load(), c.stallHold, cut, s.finished.Load(), s.refused.Load(), s.open.Load(),
		float64(s.bytes.Load())/1024/float64(max(cut, 1)))
}

// stallBody asks for an answer of many megabytes, more than loopback's
// socket buffers hold (Linux lets a loopback sender's buffer grow to
// tcp_wmem's 4 MiB): 4,096 tokens (the most /ask allows), most of them one
// 12 KB word. llmsim streams the words of the prompt's user message; a
// filter that matches no document leaves it "Sources: (no sources were
// found) Question: " and the question, so one token in seven is the
// question's one word of 3,990 three-byte characters (under the question's
// 4,000-character limit): about 7 MB in all.
var stallBody = fmt.Sprintf(`{"question":%q,"max_tokens":4096,"filters":{"doc_id":["no-such-document"]}}`,
	strings.Repeat("\u7684", 3990))

// staller asks for a long answer, reads nothing for stallHold, then drains
// the stream and counts how it ended; it asks again until ctx ends, never
// starting an ask it cannot hold for stallHold.
func (c *config) staller(ctx context.Context, host string, i int, a *counters, s *stallCounts) {
	sleep(ctx, time.Duration(i)*10*time.Millisecond)
	for ctx.Err() == nil {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < c.stallHold {
			return
		}
		conn, err := c.dial(ctx, host, i, a)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		s.asked.Add(1)
		fmt.Fprintf(conn, "POST /ask HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			host, len(stallBody), stallBody)
		if !sleep(ctx, c.stallHold) {
			s.open.Add(1)
			conn.Close()
			return
		}
		// A stream serve has not cut runs on once read, and ends (or not)
		// within this.
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(conn)
		status, _ := br.ReadString('\n')
		if len(status) < 12 || status[9:12] != "200" {
			s.refused.Add(1)
			if len(status) >= 12 {
				a.saw(status[9:12])
			}
			conn.Close()
			continue
		}
		a.saw("200")
		body, err := io.ReadAll(br)
		switch {
		case bytes.Contains(body, []byte("event: done")):
			s.finished.Add(1)
		case errors.Is(err, os.ErrDeadlineExceeded):
			s.open.Add(1)
		default: // EOF or reset before the done event
			s.cut.Add(1)
			s.bytes.Add(int64(len(body)))
		}
		conn.Close()
	}
}

// slowBody POSTs a 1,000-byte /ask body one byte every 5 s.
func (c *config) slowBody(ctx context.Context, host string, i int, a *counters) {
	sleep(ctx, time.Duration(i)*5*time.Millisecond)
	head := fmt.Sprintf("POST /ask HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", host)
	c.trickle(ctx, host, i, a, head, func(int) string { return " " })
}

// slowLoris sends one header line every 5 s and never ends the headers.
func (c *config) slowLoris(ctx context.Context, host string, i int, a *counters) {
	sleep(ctx, time.Duration(i)*time.Millisecond)
	head := fmt.Sprintf("GET /healthz HTTP/1.1\r\nHost: %s\r\n", host)
	c.trickle(ctx, host, i, a, head, func(n int) string { return fmt.Sprintf("X-Slow-%d: 1\r\n", n) })
}

// trickle sends head, then piece(n) every 5 s, on a connection it opens
// again whenever the server cuts it, until ctx ends.
func (c *config) trickle(ctx context.Context, host string, i int, a *counters, head string, piece func(n int) string) {
	for ctx.Err() == nil {
		conn, err := c.dial(ctx, host, i, a)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		go readStatus(conn, a)
		_, err = io.WriteString(conn, head)
		for n := 0; err == nil && sleep(ctx, 5*time.Second); n++ {
			_, err = io.WriteString(conn, piece(n))
		}
		conn.Close()
	}
}

// readStatus records the status line the server answers a slow client
// with (408, 400, or a closed connection).
func readStatus(conn net.Conn, a *counters) {
	line, err := bufio.NewReader(conn).ReadString('\n')
	switch {
	case err != nil && line == "":
		a.saw("closed")
	case len(line) >= 12:
		a.saw(line[9:12])
	default:
		a.saw("other")
	}
}

// pct is the nearest-rank p-th percentile of v (p = 1: the maximum).
func pct[T cmp.Ordered](v []T, p float64) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
