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
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			words = append(words, b.String())
			b.Reset()
		}
	}
	for _, r := range text {
		if r < utf8.RuneSelf {
			// ASCII fast path: most text is ASCII, and the unicode tables
			// below cost several times more per character.
			switch {
			case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
				b.WriteByte(byte(r))
			case 'A' <= r && r <= 'Z':
				b.WriteByte(byte(r) + 'a' - 'A')
			case r == '\'':
			default:
				flush()
			}
			continue
		}
		switch {
		case isIdeographic(r):
			flush()
			words = append(words, string(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(unicode.ToLower(r))
		case r == '’':
			// keep contractions together: "don’t" → "dont"
		default:
			flush()
		}
	}
	flush()
	return words
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
