package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// WriteTable writes one row per configuration: the quality figures, the
// server's retrieval time p50/p95, the errors and the questions the first
// configuration finds in its top 10 that this one loses.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	first := ""
	if len(r.Summaries) > 0 {
		first = r.Summaries[0].Name
	}
	fmt.Fprintf(tw, "configuration\tquestions\terrors\thit@1\thit@5\thit@10\tMRR@10\tnDCG@10\tretrieval p50\tretrieval p95\tlost vs %s\t\n", first)
	for _, s := range r.Summaries {
		if s.Questions == 0 {
			fmt.Fprintf(tw, "%s\t0\t%d\t-\t-\t-\t-\t-\t-\t-\t-\t\n", s.Name, s.Errors)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.2f ms\t%.2f ms\t%d\t\n", s.Name, s.Questions, s.Errors,
			s.Hit1, s.Hit5, s.Hit10, s.MRR10, s.NDCG10, s.RetrievalP50Ms, s.RetrievalP95Ms, s.Lost)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}

// round rounds x to places decimals, so that the JSON carries no float noise.
func round(x float64, places int) float64 {
	p := math.Pow10(places)
	return math.Round(x*p) / p
}
