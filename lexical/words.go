package lexical

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Words returns the normalised words of text: lower-cased runs of letters and
// digits (an apostrophe inside a word is dropped, so "don't" is "dont"), and
// each Han, Hiragana, Katakana or Hangul character as a word of its own, since
// those scripts do not separate words with spaces.
func Words(text string) []string {
	words := make([]string, 0, len(text)/6)
	var sc WordScanner
	sc.Reset(text)
	for w, ok := sc.Next(); ok; w, ok = sc.Next() {
		words = append(words, string(w))
	}
	return words
}

// WordScanner yields the words of Words one at a time without allocating:
// each is returned in a buffer the next call overwrites. The zero value
// scans the empty text; Reset starts on another (keeping the buffer).
type WordScanner struct {
	text string
	pos  int
	buf  []byte
}

// Reset starts scanning text.
func (s *WordScanner) Reset(text string) {
	s.text, s.pos = text, 0
}

// Next returns the next normalised word, valid until the next call, and
// false at the end of the text.
func (s *WordScanner) Next() ([]byte, bool) {
	s.buf = s.buf[:0]
	for s.pos < len(s.text) {
		c := s.text[s.pos]
		if c < utf8.RuneSelf {
			// ASCII fast path: most text is ASCII, and the unicode tables
			// below cost several times more per character.
			s.pos++
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
				s.buf = append(s.buf, c)
			case 'A' <= c && c <= 'Z':
				s.buf = append(s.buf, c+'a'-'A')
			case c == '\'':
			default:
				if len(s.buf) > 0 {
					return s.buf, true
				}
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s.text[s.pos:])
		switch {
		case isIdeographic(r):
			if len(s.buf) > 0 {
				return s.buf, true // the character is the next word
			}
			s.pos += size
			s.buf = utf8.AppendRune(s.buf, r)
			return s.buf, true
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			s.pos += size
			s.buf = utf8.AppendRune(s.buf, unicode.ToLower(r))
		case r == '’':
			// keep contractions together: "don’t" → "dont"
			s.pos += size
		default:
			s.pos += size
			if len(s.buf) > 0 {
				return s.buf, true
			}
		}
	}
	return s.buf, len(s.buf) > 0
}

func isIdeographic(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

// IsStopword reports whether w (already normalised) is a common English
// function word that carries no topic.
func IsStopword(w string) bool {
	_, ok := stopwords[w]
	return ok
}

// IsStopwordBytes is IsStopword of a word WordScanner returned (without
// allocating).
func IsStopwordBytes(w []byte) bool {
	_, ok := stopwords[string(w)]
	return ok
}

// ContentWords returns Words(text) without stopwords.
func ContentWords(text string) []string {
	all := Words(text)
	out := all[:0]
	for _, w := range all {
		if !IsStopword(w) {
			out = append(out, w)
		}
	}
	return out
}

var stopwords = func() map[string]struct{} {
	list := strings.Fields(`a about above after again against all am an and any are as at be because been
	before being below between both but by can could did do does doing down during each few for from further
	had has have having he her here hers herself him himself his how i if in into is it its itself just me
	more most my myself no nor not now of off on once only or other our ours ourselves out over own same she
	should so some such than that the their theirs them themselves then there these they this those through
	to too under until up very was we were what when where which while who whom why will with would you your
	yours yourself yourselves`)
	m := make(map[string]struct{}, len(list))
	for _, w := range list {
		m[w] = struct{}{}
	}
	return m
}()
