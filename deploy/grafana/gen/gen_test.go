package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// TestCommittedDashboardIsGenerated: dashboards/ragtime.json is exactly
// what the generator writes; edit dashboard.go and run `go run .`, never
// the JSON.
func TestCommittedDashboardIsGenerated(t *testing.T) {
	t.Parallel()
	want, err := DashboardJSON()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../dashboards/ragtime.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("deploy/grafana/dashboards/ragtime.json is not the generator's output: run `cd deploy/grafana/gen && go run .` and commit it")
	}
}

// TestDashboardValidatesAndFiltersByModel reads the generated JSON back
// with the SDK, strictly, validates it, and checks that every panel's SQL
// reads the chosen provider and model and that the variables exist.
func TestDashboardValidatesAndFiltersByModel(t *testing.T) {
	t.Parallel()
	// Only the panel types the dashboard uses: plugins.RegisterDefaultPlugins
	// would build every panel and data source package of the SDK.
	rt := cog.NewRuntime()
	rt.RegisterPanelcfgVariant(timeseries.VariantConfig())
	rt.RegisterPanelcfgVariant(table.VariantConfig())
	rt.RegisterDataqueryVariant(sqlQueryVariant())
	b, err := DashboardJSON()
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard.Dashboard
	if err := sdkErr(d.UnmarshalJSONStrict(b)); err != nil {
		t.Fatalf("the SDK does not read the dashboard back strictly: %v", err)
	}
	if err := sdkErr(d.Validate()); err != nil {
		t.Fatalf("the SDK finds the dashboard invalid: %v", err)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		q := ""
		if v.Query != nil && v.Query.String != nil {
			q = *v.Query.String
		}
		vars[v.Name] = q
	}
	if !strings.Contains(vars["provider"], "FROM queries") || !strings.Contains(vars["model"], "provider IN (${provider:sqlstring})") {
		t.Errorf("variables %v: want provider from queries and model among the provider's", vars)
	}
	// PanelOrRowPanel's strict reader drops a panel whose own reader
	// returns the SDK's typed-nil BuildErrors; read each panel directly.
	var raw struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile(`\$\{(provider|model):sqlstring\}`)
	panels := 0
	for i, rp := range raw.Panels {
		var p dashboard.Panel
		if err := sdkErr(p.UnmarshalJSONStrict(rp)); err != nil {
			t.Fatalf("panel %d: the SDK does not read it back strictly: %v", i, err)
		}
		if err := sdkErr(p.Validate()); err != nil {
			t.Fatalf("panel %d: the SDK finds it invalid: %v", i, err)
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", deref(p.Title))
		}
		for _, tg := range p.Targets {
			q, ok := tg.(SQLQuery)
			if !ok {
				t.Fatalf("panel %q: target %T, want SQLQuery", deref(p.Title), tg)
			}
			used := map[string]bool{}
			for _, m := range ref.FindAllStringSubmatch(q.RawSQL, -1) {
				used[m[1]] = true
			}
			if !used["provider"] || !used["model"] {
				t.Errorf("panel %q does not filter on the provider and model variables:\n%s", deref(p.Title), q.RawSQL)
			}
		}
	}
	if panels != 9 {
		t.Errorf("%d panels, want 9", panels)
	}
}

// sdkErr is err, or nil for the empty cog.BuildErrors the SDK's strict
// reader returns (a typed nil) when it found nothing wrong.
func sdkErr(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
