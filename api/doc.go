// Package api is ragtime's HTTP face: the echo server, its routes, the /ask
// Server-Sent-Events stream, the read endpoints over stored queries and the
// dashboard views, /metrics, and ragtime's own pages (embedded from web/).
//
// NewServer takes every dependency in Deps; routes.go lists every route.
package api
