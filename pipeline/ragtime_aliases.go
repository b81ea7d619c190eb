package pipeline

import "ragtime"

// The record, its figures and the read types moved to package ragtime;
// these aliases keep the old names compiling until vocab2-rewrite.sh
// rewrites the references and deletes this file.
type (
	Record          = ragtime.Record
	Figures         = ragtime.Figures
	Span            = ragtime.Span
	DoneEvent       = ragtime.DoneEvent
	Usage           = ragtime.Usage
	StatsFilter     = ragtime.StatsFilter
	QueryFilter     = ragtime.QueryFilter
	QuerySummary    = ragtime.QuerySummary
	QueryPage       = ragtime.QueryPage
	ProviderModel   = ragtime.ProviderModel
	Totals          = ragtime.Totals
	SeriesPoint     = ragtime.SeriesPoint
	StagePercentile = ragtime.StagePercentile
	TTFTTail        = ragtime.TTFTTail
	TopKTradeoff    = ragtime.TopKTradeoff
	CacheHitRate    = ragtime.CacheHitRate
	NetworkHealth   = ragtime.NetworkHealth
	SlowQuery       = ragtime.SlowQuery
	RecorderStats   = ragtime.RecorderStats
	SpoolStats      = ragtime.SpoolStats
	DocumentInfo    = ragtime.DocumentInfo
)

var (
	ErrNotFound      = ragtime.ErrNotFound
	ErrInvalidCursor = ragtime.ErrInvalidCursor
)

const (
	DefaultListLimit = ragtime.DefaultListLimit
	MaxListLimit     = ragtime.MaxListLimit
	ServerQueueMs    = ragtime.ServerQueueMs
	ServerPrefillMs  = ragtime.ServerPrefillMs
	ServerLoadMs     = ragtime.ServerLoadMs
	ServerDecodeMs   = ragtime.ServerDecodeMs
)
