package migrations

import "embed"

// FS holds the SQL migrations (NNNN_name.sql) at its root, in the format
// goose v3 reads: "-- +goose Up" and "-- +goose Down" sections.
//
//go:embed *.sql
var FS embed.FS
