package pipeline

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzFilter decodes arbitrary JSON as a filter, as POST /ask does. A
// filter Check accepts holds only names within the bounds, and survives a
// JSON round trip unchanged; one it refuses is a ValidationError naming
// filters.doc_id or filters.metadata.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		`{"doc_id":["a.md","b/c.html"],"metadata":{"team":"x","empty":""}}`, `{}`, `{"doc_id":[""]}`,
		`{"doc_id":["\u0000"]}`, `{"metadata":{"":"v"}}`, `{"metadata":{"k":"\u007f"}}`, `{"doc_id":null,"metadata":null}`,
		`{"doc_id":["` + strings.Repeat("x", MaxNameBytes+1) + `"]}`, `{"doc_id":["\ud800"]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var flt Filter
		if json.Unmarshal(raw, &flt) != nil {
			return
		}
		err := flt.Check()
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || (ve.Field != "filters.doc_id" && ve.Field != "filters.metadata") || ve.Code != "filters_invalid" || ve.Message == "" {
				t.Fatalf("error %v: want a filters_invalid ValidationError naming the field", err)
			}
			return
		}
		ok := func(s string, empty bool) bool {
			return (empty || s != "") && len(s) <= MaxNameBytes && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
		}
		if len(flt.DocIDs) > MaxFilterDocIDs || len(flt.Metadata) > MaxFilterPairs {
			t.Fatalf("accepted %d ids and %d pairs", len(flt.DocIDs), len(flt.Metadata))
		}
		for _, id := range flt.DocIDs {
			if !ok(id, false) {
				t.Fatalf("accepted doc id %q", id)
			}
		}
		for k, v := range flt.Metadata {
			if !ok(k, false) || !ok(v, true) {
				t.Fatalf("accepted metadata %q=%q", k, v)
			}
		}
		b, err := json.Marshal(flt)
		if err != nil {
			t.Fatal(err)
		}
		var again Filter
		if err := json.Unmarshal(b, &again); err != nil || again.Check() != nil {
			t.Fatalf("round trip of %s: %v %v", b, err, again.Check())
		}
		if len(flt.DocIDs) == 0 {
			flt.DocIDs = nil
		}
		if len(flt.Metadata) == 0 {
			flt.Metadata = nil
		}
		if !reflect.DeepEqual(again, flt) {
			t.Fatalf("round trip changed the filter: %+v → %+v", flt, again)
		}
	})
}
