package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"ragtime"
)

// Classify maps an error response to its Kind: 401 and 403
// KindUpstreamAuth, 404 (or a body saying the model is missing)
// KindUpstreamNotFound, 429 KindRateLimited, 408 and 504 KindTimeout, other
// 5xx KindUpstream, any other 4xx KindUpstreamRejected.
func Classify(status int, body ErrorBody) ragtime.Kind {
	switch {
	case status == 401 || status == 403:
		return ragtime.KindUpstreamAuth
	case status == 404 || body.MentionsMissingModel():
		return ragtime.KindUpstreamNotFound
	case status == 429:
		return ragtime.KindRateLimited
	case status == 408 || status == 504:
		return ragtime.KindTimeout
	case status >= 500:
		return ragtime.KindUpstream
	}
	return ragtime.KindUpstreamRejected
}

// TransportKind maps a failure to get or read a response: the caller's
// cancellation, a timeout (a passed deadline, a network timeout) or an
// unreachable server.
func TransportKind(ctx context.Context, err error) ragtime.Kind {
	var ne net.Error
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
		return ragtime.KindCancelled
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return ragtime.KindTimeout
	}
	return ragtime.KindUpstream
}

// ErrorBody is the error object of an upstream error body, in the shapes
// seen in the wild: {"error": {"message", "type", "code"}}, {"error":
// "text"}, {"message": "text"}, {"detail": "text"}, or plain text.
type ErrorBody struct {
	Message string
	Type    string
	Code    string
}

// ParseError reads an error body; a body that is not JSON is its own
// message (trimmed).
func ParseError(body []byte) ErrorBody {
	var env struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	var ue ErrorBody
	if json.Unmarshal(body, &env) != nil {
		ue.Message = strings.TrimSpace(string(body))
		return ue
	}
	if len(env.Error) > 0 && string(env.Error) != "null" {
		ue = decodeErrorObject(env.Error)
	}
	if ue.Message == "" {
		ue.Message = env.Message
	}
	if ue.Message == "" {
		ue.Message = env.Detail
	}
	return ue
}

// decodeErrorObject reads an "error" value that is an object or a string.
func decodeErrorObject(raw json.RawMessage) ErrorBody {
	var obj struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		ue := ErrorBody{Message: obj.Message, Type: obj.Type}
		if len(obj.Code) > 0 && string(obj.Code) != "null" {
			var s string
			if json.Unmarshal(obj.Code, &s) == nil {
				ue.Code = s
			} else {
				ue.Code = string(obj.Code)
			}
		}
		return ue
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return ErrorBody{Message: s}
	}
	return ErrorBody{Message: string(raw)}
}

// MentionsMissingModel reports whether the error says the model does not
// exist (OpenAI: code model_not_found; vLLM, Ollama, llama.cpp: a message
// naming the model as not found or not existing).
func (ue ErrorBody) MentionsMissingModel() bool {
	if ue.Code == "model_not_found" {
		return true
	}
	m := strings.ToLower(ue.Message)
	if !strings.Contains(m, "model") {
		return false
	}
	for _, p := range []string{"not found", "does not exist", "not exist", "no such model", "unknown model", "invalid model", "not supported", "not available"} {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// Detail is the message for an error text: scrubbed, at most 300 bytes,
// "(no error message)" when empty.
func (ue ErrorBody) Detail(s Scrubber) string {
	d := s.Scrub(Truncate(strings.TrimSpace(ue.Message), 300))
	if d == "" {
		return "(no error message)"
	}
	return d
}

// ErrorBodyLimit bounds how much of an error response is read.
const ErrorBodyLimit = 4 << 10

// ErrTooLarge is returned by ReadLimited for a body over its limit.
var ErrTooLarge = errors.New("the response body is larger than allowed")

// ReadLimited reads r to its end, but no more than limit bytes: a longer
// body yields the first limit bytes and an error wrapping ErrTooLarge.
func ReadLimited(r io.Reader, limit int64) ([]byte, error) {
	return ReadLimitedSize(r, limit, -1)
}

// ReadLimitedSize is ReadLimited for a body whose size is announced
// (http.Response.ContentLength; -1 when it is not): one allocation of that
// size instead of io.ReadAll's growing from 512 bytes, which copied an
// embedding's few kilobytes four times.
func ReadLimitedSize(r io.Reader, limit, size int64) ([]byte, error) {
	if size < 0 || size > limit {
		size = 511 // io.ReadAll's start
	}
	return ReadLimitedTo(make([]byte, 0, size+1), r, limit)
}

// ReadLimitedTo is ReadLimited into dst's room (grown when the body does
// not fit), for a caller that reuses its buffer between bodies.
func ReadLimitedTo(dst []byte, r io.Reader, limit int64) ([]byte, error) {
	b, err := readAll(io.LimitReader(r, limit+1), dst[:0])
	if err != nil {
		return b, err
	}
	if int64(len(b)) > limit {
		return b[:limit], fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)
	}
	return b, nil
}

// readAll is io.ReadAll into b's room, growing it only when full: a body
// of the announced size and the EOF after it fit in one allocation.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// ReadErrorBody reads the start of an error response (up to
// ErrorBodyLimit); the rest is dropped.
func ReadErrorBody(r io.Reader) []byte {
	b, _ := io.ReadAll(io.LimitReader(r, ErrorBodyLimit))
	return b
}

// Truncate shortens s to at most n bytes without splitting a UTF-8
// sequence, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
