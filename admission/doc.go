// Package admission decides whether an ask may start: a bound on the streams
// running in the process and per caller, a bounded wait for a free slot (the
// queue stage), and a token bucket on each caller's asks per minute. A caller
// is whoever the server says it is (a client IP, or an API key); its limits
// come with it.
package admission
