package api

import (
	"net/http"
	"testing"

	"ragtime"
)

// TestKindStatusCoversEveryKind: a Kind added to ragtime without a row in
// kindStatus fails here, instead of being answered 500 unnoticed.
func TestKindStatusCoversEveryKind(t *testing.T) {
	t.Parallel()
	for _, k := range ragtime.Kinds() {
		s, ok := kindStatus[k]
		if !ok {
			t.Errorf("kind %s has no HTTP status in kindStatus", k)
			continue
		}
		if s != StatusClientClosedRequest && http.StatusText(s) == "" {
			t.Errorf("kind %s maps to %d, not an HTTP status", k, s)
		}
	}
	if len(kindStatus) != len(ragtime.Kinds()) {
		t.Errorf("kindStatus has %d rows for %d kinds", len(kindStatus), len(ragtime.Kinds()))
	}
}

// TestFailureStatusFollowsKind: a failed non-streamed answer's status comes
// from the failure's Kind, not from its code's spelling.
func TestFailureStatusFollowsKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    ragtime.Error
		want int
	}{
		{ragtime.Error{Kind: ragtime.KindRateLimited, Code: ragtime.CodeLLMRateLimited}, http.StatusTooManyRequests},
		{ragtime.Error{Kind: ragtime.KindRateLimited, Code: ragtime.CodeEmbedRateLimited}, http.StatusTooManyRequests},
		{ragtime.Error{Kind: ragtime.KindTimeout, Code: ragtime.CodeLLMTimeout}, http.StatusGatewayTimeout},
		{ragtime.Error{Kind: ragtime.KindTimeout, Code: ragtime.CodeEmbedTimeout}, http.StatusGatewayTimeout},
		{ragtime.Error{Kind: ragtime.KindUpstreamAuth, Code: ragtime.CodeLLMAuth}, http.StatusBadGateway},
		{ragtime.Error{Kind: ragtime.KindUpstream, Code: ragtime.CodeLLMUnavailable}, http.StatusBadGateway},
		{ragtime.Error{Kind: ragtime.KindUnavailable, Code: ragtime.CodeServerShutdown}, http.StatusServiceUnavailable},
		{ragtime.Error{Kind: ragtime.KindInternal, Code: ragtime.CodeInternal}, http.StatusInternalServerError},
		// A code that looks like a timeout but is not one by kind.
		{ragtime.Error{Kind: ragtime.KindUpstream, Code: "made_up_timeout"}, http.StatusBadGateway},
	} {
		if got := failureStatus(&tc.e); got != tc.want {
			t.Errorf("failureStatus(%s %s) = %d, want %d", tc.e.Kind, tc.e.Code, got, tc.want)
		}
	}
}
