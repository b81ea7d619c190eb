// Command gen writes ragtime's Grafana dashboard, built with the Grafana
// Foundation SDK, to ../dashboards/ragtime.json (or the file named by -out):
//
//	cd deploy/grafana/gen && go run .
//
// It is a module of its own so that the SDK (tens of generated packages)
// is never built with ragtime: `make test` runs its test, which checks that
// the committed JSON is what it generates.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("out", "../dashboards/ragtime.json", "where to write the dashboard JSON")
	flag.Parse()
	b, err := DashboardJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%d bytes)\n", *out, len(b))
}
