package pipeline

import (
	"reflect"
	"testing"
)

func TestFilterWithinNeverWidensTheScope(t *testing.T) {
	t.Parallel()
	tenantA := Filter{Metadata: map[string]string{"tenant": "a"}}
	docs := Filter{DocIDs: []string{"a1.md", "a2.md"}}
	tests := []struct {
		name       string
		req, scope Filter
		want       Filter
		ok         bool
	}{
		{"no scope keeps the request", Filter{DocIDs: []string{"x"}}, Filter{}, Filter{DocIDs: []string{"x"}}, true},
		{"no request takes the scope", Filter{}, tenantA, tenantA, true},
		{"other tenant's metadata matches nothing", Filter{Metadata: map[string]string{"tenant": "b"}}, tenantA, Filter{}, false},
		{"extra metadata narrows", Filter{Metadata: map[string]string{"team": "x"}}, tenantA,
			Filter{Metadata: map[string]string{"tenant": "a", "team": "x"}}, true},
		{"doc ids intersect", Filter{DocIDs: []string{"a2.md", "b1.md", "a2.md"}}, docs, Filter{DocIDs: []string{"a2.md"}}, true},
		{"disjoint doc ids match nothing", Filter{DocIDs: []string{"b1.md"}}, docs, Filter{}, false},
		{"request doc ids under a metadata scope", Filter{DocIDs: []string{"b1.md"}}, tenantA,
			Filter{DocIDs: []string{"b1.md"}, Metadata: map[string]string{"tenant": "a"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.req.Within(tt.scope)
			if ok != tt.ok || (ok && !reflect.DeepEqual(got, tt.want)) {
				t.Errorf("Within = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
