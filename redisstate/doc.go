// Package redisstate is the state that ragtime's replicas share through one
// Redis, so that they act as one behind a load balancer: per-caller rate
// limits as one GCRA bucket per caller, per-caller and per-backend stream
// bounds as leases with a TTL (renewed while the stream runs, expiring when
// a replica dies) — an ask's bucket and leases taken in one Lua script, one
// round trip per ask (Store.Admit) — and the events of a running query
// whose client left as a bounded, expiring Redis Stream that any replica
// replays and follows for a Last-Event-ID reconnect (/ask's, and the chat
// door's resumable streams).
//
// Every call is bounded (short timeouts, no retries) and a failure opens a
// breaker for a second, during which calls fail at once: the consumers fall
// back to their per-replica state (admission's buckets and slots, the
// replica's own resume buffer) rather than fail an ask.
package redisstate
