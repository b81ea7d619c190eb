package postgres

import "fmt"

// Exported for the tests of package postgres_test, which read the plans of
// the statements GetQuery runs.
var (
	SelectQuery  = selectQuery
	SelectStages = selectStages
	IDWindow     = idWindow
	RollupBucket = rollupBucket
	StageColumns = stageColumns
	TotalsSQL    = fmt.Sprintf(totalsSQL, "")
	SeriesSQL    = fmt.Sprintf(seriesSQL, "")
)
