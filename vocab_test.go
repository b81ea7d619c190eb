package ragtime

import (
	"strings"
	"testing"
)

// TestEveryKindHasAName: a Kind added without its name would print as
// Kind(n) in logs.
func TestEveryKindHasAName(t *testing.T) {
	t.Parallel()
	seen := map[string]Kind{}
	for _, k := range Kinds() {
		name := k.String()
		if name == "" || strings.HasPrefix(name, "Kind(") {
			t.Errorf("kind %d has no name", uint8(k))
		}
		if other, ok := seen[name]; ok {
			t.Errorf("kinds %d and %d share the name %q", uint8(other), uint8(k), name)
		}
		seen[name] = k
	}
	if got := Kind(200).String(); got != "Kind(200)" {
		t.Errorf("an unknown kind prints as %q", got)
	}
}

// TestEveryStageHasItsCodes: a stage added to Stages without its row in
// stageCodes would fail and time out as "internal".
func TestEveryStageHasItsCodes(t *testing.T) {
	t.Parallel()
	for _, st := range Stages() {
		if got, want := FailedCode(st), st+"_failed"; got != want {
			t.Errorf("FailedCode(%q) = %q, want %q", st, got, want)
		}
		if got, want := TimeoutCode(st), st+"_timeout"; got != want {
			t.Errorf("TimeoutCode(%q) = %q, want %q", st, got, want)
		}
	}
	if len(stageCodes) != len(Stages()) {
		t.Errorf("stageCodes has %d rows for %d stages", len(stageCodes), len(Stages()))
	}
	if got := FailedCode(""); got != CodeInternal {
		t.Errorf("FailedCode(\"\") = %q, want %q", got, CodeInternal)
	}
	if got := TimeoutCode("no_such_stage"); got != CodeInternal {
		t.Errorf("TimeoutCode(no_such_stage) = %q, want %q", got, CodeInternal)
	}
}
