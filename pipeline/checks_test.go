package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	"ragtime"
)

func TestSafeRequestID(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"req_abc-123.4:5":                        "req_abc-123.4:5",
		"":                                       "",
		"<b>":                                    "",
		"a b":                                    "",
		"a\nb":                                   "",
		strings.Repeat("x", MaxRequestIDBytes):   strings.Repeat("x", MaxRequestIDBytes),
		strings.Repeat("x", MaxRequestIDBytes+1): "",
		"id\x00":                                 "",
		"ünï":                                    "",
	} {
		if got := SafeRequestID(id); got != want {
			t.Errorf("SafeRequestID(%q) = %q, want %q", id, got, want)
		}
	}
}

// idGenerator answers with a fixed request id, on success or on failure.
type idGenerator struct {
	scriptGenerator
	id string
}

func (g *idGenerator) Generate(ctx context.Context, req *GenerateRequest, emit func(Delta) error, out *Generation) error {
	gen, err := g.generate(ctx, *req, emit)
	*out = gen
	return err
}

func (g *idGenerator) generate(ctx context.Context, req GenerateRequest, emit func(Delta) error) (Generation, error) {
	gen, err := g.scriptGenerator.generate(ctx, req, emit)
	gen.RequestID = g.id
	return gen, err
}

// TestUnsafeRequestIDIsNotRecorded: whatever a generator reports, the
// record (and so the row) keeps a request id only when it is safe.
func TestUnsafeRequestIDIsNotRecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ id, want string }{{"req_1", "req_1"}, {"<img src=x>", ""}, {strings.Repeat("9", 500), ""}} {
		ok := &idGenerator{scriptGenerator: scriptGenerator{deltas: []Delta{{Text: "hi"}}}, id: tc.id}
		failing := &scriptGenerator{err: &ragtime.Error{Code: "llm_unavailable", Message: "503", Status: 503, RequestID: tc.id}}
		for _, gen := range []Generator{ok, failing} {
			p, recorder := newTestPipeline(t, gen, nil)
			rec := p.Run(context.Background(), request(t, "q", 3, 1), &recStream{})
			if rec.RequestID != tc.want || recorder.recs[0].RequestID != tc.want {
				t.Errorf("generator id %.20q (status %s): recorded %q, want %q", tc.id, rec.Status, rec.RequestID, tc.want)
			}
		}
	}
}

func TestFilterAndModelChecksNameTheField(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxFilterDocIDs+1)
	for i := range many {
		many[i] = "d"
	}
	pairs := map[string]string{}
	for i := range MaxFilterPairs + 1 {
		pairs[strings.Repeat("k", i+1)] = "v"
	}
	for _, tc := range []struct {
		name  string
		err   error
		field string // "" means valid
	}{
		{"zero filter", Filter{}.Check(), ""},
		{"doc ids", Filter{DocIDs: []string{"a.md", "b/c.html"}, Metadata: map[string]string{"team": "x", "empty": ""}}.Check(), ""},
		{"NUL doc id", Filter{DocIDs: []string{"a\x00"}}.Check(), "filters.doc_id"},
		{"invalid UTF-8 doc id", Filter{DocIDs: []string{"\xff"}}.Check(), "filters.doc_id"},
		{"empty doc id", Filter{DocIDs: []string{""}}.Check(), "filters.doc_id"},
		{"too many doc ids", Filter{DocIDs: many}.Check(), "filters.doc_id"},
		{"empty key", Filter{Metadata: map[string]string{"": "x"}}.Check(), "filters.metadata"},
		{"NUL value", Filter{Metadata: map[string]string{"k": "\x00"}}.Check(), "filters.metadata"},
		{"too many pairs", Filter{Metadata: pairs}.Check(), "filters.metadata"},
		{"model", CheckModel("gpt-4o"), ""},
		{"model NUL", CheckModel("a\x00"), "model"},
		{"model invalid UTF-8", CheckModel("\xff"), "model"},
		{"model too long", CheckModel(strings.Repeat("m", MaxModelBytes+1)), "model"},
	} {
		var ve *ValidationError
		switch {
		case tc.field == "" && tc.err != nil:
			t.Errorf("%s: %v, want valid", tc.name, tc.err)
		case tc.field != "" && !errors.As(tc.err, &ve):
			t.Errorf("%s: %v, want a *ValidationError", tc.name, tc.err)
		case tc.field != "" && (ve.Field != tc.field || ve.Code == "" || ve.Message == ""):
			t.Errorf("%s: %+v, want field %q with a code and a message", tc.name, ve, tc.field)
		}
	}
}
