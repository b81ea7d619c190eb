package pipeline

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a caller may name in a request. Text that reaches
// PostgreSQL must be valid UTF-8 without NUL (a text column refuses both),
// so every caller-given name is checked here rather than failing at the
// database as a 500.
const (
	// MaxModelBytes bounds a model name.
	MaxModelBytes = 200
	// MaxFilterDocIDs bounds how many document ids one filter lists.
	MaxFilterDocIDs = 1000
	// MaxFilterPairs bounds how many metadata pairs one filter lists.
	MaxFilterPairs = 100
	// MaxNameBytes bounds a document id, a metadata key or a value in a
	// filter.
	MaxNameBytes = 512
)

// CheckModel reports whether model is a name a request may carry (and a
// query list may filter on): at most MaxModelBytes of UTF-8 without control
// characters. The empty name (the configured model) is valid.
func CheckModel(model string) error {
	return checkLabel("model", model)
}

// CheckProvider reports whether provider is a name a query list or the
// stats may filter on, by CheckModel's rule; its error names the field
// provider.
func CheckProvider(provider string) error {
	return checkLabel("provider", provider)
}

// checkLabel is CheckModel's rule for field.
func checkLabel(field, v string) error {
	if len(v) > MaxModelBytes {
		return &ValidationError{Field: field, Code: field + "_invalid", Message: fmt.Sprintf("%s name is longer than %d bytes", field, MaxModelBytes)}
	}
	if !utf8.ValidString(v) || strings.ContainsFunc(v, unicode.IsControl) {
		return &ValidationError{Field: field, Code: field + "_invalid", Message: field + " name must be UTF-8 without control characters"}
	}
	return nil
}

// Check reports the first thing wrong with a filter: too many document ids
// or metadata pairs, an empty or over-long name, or a name that is not
// UTF-8 or holds a control character. The field it names is
// "filters.doc_id" or "filters.metadata".
func (f Filter) Check() error {
	bad := func(field, msg string, args ...any) error {
		return &ValidationError{Field: field, Code: "filters_invalid", Message: fmt.Sprintf(msg, args...)}
	}
	if len(f.DocIDs) > MaxFilterDocIDs {
		return bad("filters.doc_id", "filters.doc_id lists %d documents; at most %d are allowed", len(f.DocIDs), MaxFilterDocIDs)
	}
	for _, id := range f.DocIDs {
		if !validName(id) {
			return bad("filters.doc_id", "filters.doc_id %.80q must be 1–%d bytes of UTF-8 without control characters", id, MaxNameBytes)
		}
	}
	if len(f.Metadata) > MaxFilterPairs {
		return bad("filters.metadata", "filters.metadata has %d pairs; at most %d are allowed", len(f.Metadata), MaxFilterPairs)
	}
	for k, v := range f.Metadata {
		if !validName(k) {
			return bad("filters.metadata", "filters.metadata key %.80q must be 1–%d bytes of UTF-8 without control characters", k, MaxNameBytes)
		}
		if v != "" && !validName(v) {
			return bad("filters.metadata", "filters.metadata[%.80q] value must be at most %d bytes of UTF-8 without control characters", k, MaxNameBytes)
		}
	}
	return nil
}

// validName: 1–MaxNameBytes bytes of UTF-8 without control characters.
func validName(s string) bool {
	return s != "" && len(s) <= MaxNameBytes && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// MaxRequestIDBytes bounds an upstream's request id.
const MaxRequestIDBytes = 128

// SafeRequestID returns id when it looks like a request id (1 to
// MaxRequestIDBytes letters, digits, '.', '_', ':' or '-') and "" otherwise.
// The id comes from the upstream's headers: anything else (a header stuffed
// with text, a key echoed back, markup) is neither stored nor shown.
func SafeRequestID(id string) string {
	if id == "" || len(id) > MaxRequestIDBytes {
		return ""
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '.', b == '_', b == ':', b == '-':
		default:
			return ""
		}
	}
	return id
}

// MaxFinishReasonBytes bounds a stored finish reason.
const MaxFinishReasonBytes = 32

// safeFinishReason is a provider's finish reason as it may be stored and
// exported: short and of the characters a request id may have; "" for
// anything else (an upstream's text never reaches the database unchecked).
func safeFinishReason(r string) string {
	if len(r) > MaxFinishReasonBytes {
		return ""
	}
	return SafeRequestID(r)
}
