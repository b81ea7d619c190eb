package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
)

// The SDK ships query types for the core data sources it generates from
// schemas, not for grafana-postgresql-datasource; SQLQuery is that data
// source's raw-SQL target, written as Grafana stores it.

// postgresType is the plugin id of Grafana's PostgreSQL data source.
const postgresType = "grafana-postgresql-datasource"

// SQLQuery is one raw-SQL target of the PostgreSQL data source.
type SQLQuery struct {
	RefID      string               `json:"refId"`
	Datasource common.DataSourceRef `json:"datasource"`
	EditorMode string               `json:"editorMode"`
	// Format is time_series or table.
	Format   string `json:"format"`
	RawQuery bool   `json:"rawQuery"`
	RawSQL   string `json:"rawSql"`
}

// ImplementsDataqueryVariant makes SQLQuery a dashboard target.
func (SQLQuery) ImplementsDataqueryVariant() {}

// DataqueryType is the data source's plugin id.
func (SQLQuery) DataqueryType() string { return postgresType }

// Equals compares two targets.
func (q SQLQuery) Equals(other variants.Dataquery) bool {
	o, ok := other.(SQLQuery)
	return ok && o.RefID == q.RefID && o.Format == q.Format && o.RawSQL == q.RawSQL &&
		ptrEq(o.Datasource.Type, q.Datasource.Type) && ptrEq(o.Datasource.Uid, q.Datasource.Uid)
}

// Validate checks what Grafana needs to run the target.
func (q SQLQuery) Validate() error {
	if q.RawSQL == "" {
		return fmt.Errorf("target %s has no SQL", q.RefID)
	}
	if q.Format != "time_series" && q.Format != "table" {
		return fmt.Errorf("target %s: format %q is neither time_series nor table", q.RefID, q.Format)
	}
	return nil
}

func ptrEq(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// sqlQueryVariant lets the SDK's runtime read SQLQuery targets back (the
// test unmarshals the dashboard it generated).
func sqlQueryVariant() variants.DataqueryConfig {
	return variants.DataqueryConfig{
		Identifier: postgresType,
		DataqueryUnmarshaler: func(raw []byte) (variants.Dataquery, error) {
			var q SQLQuery
			if err := json.Unmarshal(raw, &q); err != nil {
				return nil, err
			}
			return q, nil
		},
		StrictDataqueryUnmarshaler: func(raw []byte) (variants.Dataquery, error) {
			var q SQLQuery
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&q); err != nil {
				return nil, fmt.Errorf("a PostgreSQL target: %w", err)
			}
			return q, q.Validate()
		},
	}
}

var _ cog.Builder[variants.Dataquery] = (*SQLQueryBuilder)(nil)

// SQLQueryBuilder builds an SQLQuery against the ragtime data source.
type SQLQueryBuilder struct{ q SQLQuery }

// NewSQL returns a builder of target A running sql in format.
func NewSQL(format, sql string) *SQLQueryBuilder {
	return &SQLQueryBuilder{SQLQuery{RefID: "A", Datasource: ragtimeDS(), EditorMode: "code", Format: format, RawQuery: true, RawSQL: sql}}
}

// Build returns the target, or what is wrong with it.
func (b *SQLQueryBuilder) Build() (variants.Dataquery, error) {
	if err := b.q.Validate(); err != nil {
		return nil, err
	}
	return b.q, nil
}
