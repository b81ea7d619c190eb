package upstream

import (
	"net/url"
	"regexp"
	"strings"
)

// Scrubber removes API keys, and anything shaped like one, from text that
// came from the network or from errors, before it reaches a log, the
// database, the stream or an error message. The zero value scrubs the
// key-shaped patterns only.
type Scrubber struct {
	secrets []string
}

// keyLike matches tokens shaped like provider API keys (sk-…, including the
// masked forms providers echo back, such as sk-abc*****wxyz), any masked
// token (four or more asterisks) and bearer credentials.
var keyLike = regexp.MustCompile(`(?i)\b(?:sk|pk|rk)-[A-Za-z0-9_*.\-]{6,}|[A-Za-z0-9_\-.]*\*{4,}[A-Za-z0-9_\-.]*|bearer\s+\S+`)

// NewScrubber returns a Scrubber for the given keys (empty ones are
// ignored). Besides each key it removes the first 8 and last 6 characters
// of a long key, which providers echo back in masked form.
func NewScrubber(keys ...string) Scrubber {
	var s Scrubber
	for _, key := range keys {
		t := strings.TrimSpace(key)
		if t == "" {
			continue
		}
		s.secrets = append(s.secrets, key)
		if t != key {
			s.secrets = append(s.secrets, t)
		}
		if len(t) >= 16 {
			s.secrets = append(s.secrets, t[:8], t[len(t)-6:])
		}
	}
	return s
}

// Scrub returns text with every key and key-like token replaced by
// "[redacted]".
func (s Scrubber) Scrub(text string) string {
	// Patterns first: replacing a bare key prefix first would break up a
	// masked key and leave its tail behind.
	text = keyLike.ReplaceAllString(text, "[redacted]")
	for _, k := range s.secrets {
		if strings.Contains(text, k) {
			text = strings.ReplaceAll(text, k, "[redacted]")
		}
	}
	return text
}

// Wrap returns err with its text scrubbed; errors.Is and errors.As still
// see the original chain. Wrap(nil) is nil.
func (s Scrubber) Wrap(err error) error {
	if err == nil {
		return nil
	}
	return scrubbedError{err: err, s: s}
}

type scrubbedError struct {
	err error
	s   Scrubber
}

func (e scrubbedError) Error() string { return e.s.Scrub(e.err.Error()) }
func (e scrubbedError) Unwrap() error { return e.err }

// RedactURL masks the password of a URL with credentials in it, for
// messages (they reach the stream, the query row and the logs). An
// unparseable URL keeps only what follows its last '@'.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			return "…" + raw[i:]
		}
		return raw
	}
	return u.Redacted()
}
