package pipeline

import "ragtime"

// Moved to package ragtime; these aliases keep the old names compiling
// until vocab2-rewrite.sh rewrites the references and deletes this file.
type (
	ConnInfo = ragtime.ConnInfo
	Recorder = ragtime.Recorder
)

const (
	RetrievalHybrid  = ragtime.RetrievalHybrid
	RetrievalVector  = ragtime.RetrievalVector
	RetrievalLexical = ragtime.RetrievalLexical
)

func NearestRank(sorted []float64, p float64) float64 { return ragtime.NearestRank(sorted, p) }
