package tokens

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// A runeClass holds the Unicode facts the pre-tokenizers' patterns ask of a
// rune, one bit each, each read from the unicode package's tables exactly as
// regexp2 reads them (\p{X} is unicode.Is(unicode.X, r), \s is
// unicode.IsSpace), so the hand-written matchers see the same classes the
// library's regular expressions do.
type runeClass uint8

const (
	classUpper  runeClass = 1 << iota // \p{Lu} or \p{Lt}
	classLower                        // \p{Ll}
	classOther                        // \p{Lm} or \p{Lo}: in both of o200k's case classes
	classMark                         // \p{M}
	classLetter                       // \p{L}
	classNumber                       // \p{N}
	classSpace                        // \s
)

// o200k's two case classes: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
// [\p{Ll}\p{Lm}\p{Lo}\p{M}].
const (
	o200kUpper = classUpper | classOther | classMark
	o200kLower = classLower | classOther | classMark
)

// classifyRune computes a rune's class from the unicode tables.
func classifyRune(r rune) runeClass {
	var c runeClass
	if unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r) {
		c |= classUpper
	}
	if unicode.Is(unicode.Ll, r) {
		c |= classLower
	}
	if unicode.Is(unicode.Lm, r) || unicode.Is(unicode.Lo, r) {
		c |= classOther
	}
	if unicode.Is(unicode.M, r) {
		c |= classMark
	}
	if unicode.Is(unicode.L, r) {
		c |= classLetter
	}
	if unicode.Is(unicode.N, r) {
		c |= classNumber
	}
	if unicode.IsSpace(r) {
		c |= classSpace
	}
	return c
}

// bmpClasses caches classifyRune for the Basic Multilingual Plane (64 KiB,
// built once by the first New): a table read instead of seven binary
// searches per rune. Runes above it are classified on the spot.
var (
	bmpClassesOnce sync.Once
	bmpClasses     *[0x10000]runeClass
)

func loadBMPClasses() {
	bmpClassesOnce.Do(func() {
		t := new([0x10000]runeClass)
		for r := range t {
			t[r] = classifyRune(rune(r))
		}
		bmpClasses = t
	})
}

// runeAt decodes the rune starting at s[i] (s is valid UTF-8) and returns it
// with its class and width.
func runeAt(s string, i int) (rune, runeClass, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), bmpClasses[b], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return r, bmpClasses[r], w
	}
	return r, classifyRune(r), w
}

// classAt returns the class and width of the rune starting at s[i].
func classAt(s string, i int) (runeClass, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return bmpClasses[b], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	if r < 0x10000 {
		return bmpClasses[r], w
	}
	return classifyRune(r), w
}
