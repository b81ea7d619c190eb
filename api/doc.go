// Package api is ragtime's HTTP face: the echo server, its routes, the /ask
// Server-Sent-Events stream and the read endpoints over stored queries.
//
// NewServer takes every dependency in Deps; routes.go lists every route.
package api
