package upstream

import "ragtime"

// The kinds of failure moved to package ragtime (ragtime.Kind). These
// aliases keep code that names them through upstream compiling until
// /work/wt/vocab-rewrite.sh has rewritten the references; that script
// deletes this file.

type Kind = ragtime.Kind

const (
	KindAuth        = ragtime.KindUpstreamAuth
	KindNotFound    = ragtime.KindUpstreamNotFound
	KindRateLimited = ragtime.KindRateLimited
	KindTimeout     = ragtime.KindTimeout
	KindUnavailable = ragtime.KindUpstream
	KindRejected    = ragtime.KindUpstreamRejected
	KindCancelled   = ragtime.KindCancelled
)
