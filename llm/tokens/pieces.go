package tokens

// The pre-tokenizers: each xxxPieceEnd(s, i) returns the end of the piece
// the encoding's regular expression (tiktoken-go v0.1.8's encoding.go, quoted
// above each) matches at s[i], with the leftmost-first, greedy-with-
// backtracking semantics of the regexp2 engine tiktoken-go runs it on, or i
// when no alternative matches there (the engine then skips the rune: no
// rune reaches that case with these patterns, but the callers honour it).
// s is valid UTF-8: Counter turns invalid bytes into U+FFFD first, as
// tiktoken-go's []rune conversion does.
//
// Each alternative is tried in the pattern's order, and within one the
// optional prefix is tried taken before not taken, so the first success is
// the engine's. The backtracking each needs is worked out by hand in the
// comments: a greedy run of one class followed by a run of another gives
// back runes one at a time until the second can start.

// notPunct is what [^\s\p{L}\p{N}] excludes.
const notPunct = classSpace | classLetter | classNumber

// o200kPieceEnd matches o200k_base's pattern:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}
//	| ?[^\s\p{L}\p{N}]+[\r\n/]*
//	|\s*[\r\n]+
//	|\s+(?!\S)
//	|\s+
func o200kPieceEnd(s string, i int) int {
	r0, c0, w0 := runeAt(s, i)
	prefixed := c0&(classLetter|classNumber) == 0 && r0 != '\r' && r0 != '\n'
	if prefixed {
		if e := o200kLowerWordEnd(s, i+w0); e > i+w0 {
			return contractionEnd(s, e, true)
		}
	}
	if e := o200kLowerWordEnd(s, i); e > i {
		return contractionEnd(s, e, true)
	}
	if prefixed {
		if e := o200kUpperWordEnd(s, i+w0); e > i+w0 {
			return contractionEnd(s, e, true)
		}
	}
	if e := o200kUpperWordEnd(s, i); e > i {
		return contractionEnd(s, e, true)
	}
	if c0&classNumber != 0 {
		return numberEnd(s, i, 3)
	}
	if e := punctEnd(s, i, true, true); e > i {
		return e
	}
	return spaceEnd(s, i, true)
}

// o200kLowerWordEnd matches [U]*[W]+ at s[j] (U and W being o200k's upper
// and lower classes, which share Lm, Lo and M) and returns its end, or j.
// U* first takes the whole run of U; if the rune after it is in W (then an
// Ll), W+ takes the run of W from there. Otherwise U* gives back runes until
// W+ can start on one of them: the last rune of the run that is also in W,
// after which W+ stops at once (the runes after it are U but not W, and the
// rune after the run is in neither).
func o200kLowerWordEnd(s string, j int) int {
	k, lastLowerEnd := j, j
	for k < len(s) {
		c, w := classAt(s, k)
		if c&o200kUpper == 0 {
			if c&o200kLower != 0 {
				return runEnd(s, k+w, o200kLower)
			}
			break
		}
		k += w
		if c&o200kLower != 0 {
			lastLowerEnd = k
		}
	}
	return lastLowerEnd
}

// o200kUpperWordEnd matches [U]+[W]* at s[j] and returns its end, or j.
// Neither part needs to give anything back: W* may be empty.
func o200kUpperWordEnd(s string, j int) int {
	k := runEnd(s, j, o200kUpper)
	if k == j {
		return j
	}
	return runEnd(s, k, o200kLower)
}

// cl100kPieceEnd matches cl100k_base's pattern:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kPieceEnd(s string, i int) int {
	if e := contractionEnd(s, i, true); e > i {
		return e
	}
	r0, c0, w0 := runeAt(s, i)
	switch {
	case c0&classLetter != 0:
		// The prefix cannot be a letter, so only the unprefixed \p{L}+ can match.
		return runEnd(s, i+w0, classLetter)
	case c0&classNumber == 0 && r0 != '\r' && r0 != '\n':
		// Prefixed; unprefixed cannot match (s[i] is no letter).
		if e := runEnd(s, i+w0, classLetter); e > i+w0 {
			return e
		}
	}
	if c0&classNumber != 0 {
		return numberEnd(s, i, 3)
	}
	if e := punctEnd(s, i, true, false); e > i {
		return e
	}
	return spaceEnd(s, i, true)
}

// gpt2PieceEnd matches p50k_base's and r50k_base's pattern (GPT-2's):
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2PieceEnd(s string, i int) int {
	if e := contractionEnd(s, i, false); e > i {
		return e
	}
	// Each " ?X+" tries the space first; without it, X+ would have to start
	// on the space, which is none of \p{L}, \p{N} or [^\s\p{L}\p{N}].
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		j = i + 1
	}
	c, w := classAt(s, j)
	switch {
	case c&classLetter != 0:
		return runEnd(s, j+w, classLetter)
	case c&classNumber != 0:
		return runEnd(s, j+w, classNumber)
	case c&notPunct == 0:
		return punctRunEnd(s, j+w)
	}
	return spaceEnd(s, i, false)
}

// contractionEnd matches 's|'t|'re|'ve|'m|'ll|'d at s[i] (case-insensitively
// when foldCase) and returns its end, or i. regexp2 compares
// unicode.ToLower of the input with the pattern; no rune outside ASCII
// lowers to an apostrophe or one of these letters (TestContractionFolding
// checks the unicode tables), so folding ASCII is exact.
func contractionEnd(s string, i int, foldCase bool) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	fold := func(b byte) byte {
		if foldCase && 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch fold(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && fold(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && fold(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return i
}

// runEnd returns the end of the run, from s[i], of runes with any class bit
// of want.
func runEnd(s string, i int, want runeClass) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&want == 0 {
			break
		}
		i += w
	}
	return i
}

// punctRunEnd returns the end of the run, from s[i], of [^\s\p{L}\p{N}].
func punctRunEnd(s string, i int) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&notPunct != 0 {
			break
		}
		i += w
	}
	return i
}

// numberEnd matches \p{N}{1,max} at s[i] and returns its end, or i.
func numberEnd(s string, i, max int) int {
	for n := 0; n < max && i < len(s); n++ {
		c, w := classAt(s, i)
		if c&classNumber == 0 {
			break
		}
		i += w
	}
	return i
}

// punctEnd matches " ?[^\s\p{L}\p{N}]+" followed, when newlines, by
// [\r\n]* ([\r\n/]* when also slash) at s[i] and returns its end, or i.
// Without the space the run would have to start on the space, which it
// excludes; the trailing set is always satisfied, so nothing backtracks.
func punctEnd(s string, i int, newlines, slash bool) int {
	j := i
	if s[i] == ' ' {
		j++
	}
	k := punctRunEnd(s, j)
	if k == j {
		return i
	}
	for newlines && k < len(s) && (s[k] == '\r' || s[k] == '\n' || slash && s[k] == '/') {
		k++
	}
	return k
}

// spaceEnd matches, at s[i], \s*[\r\n]+ (when newlines), then \s+(?!\S),
// then \s+, and returns the end of the first that matches, or i. Each
// starts with the run of \s from s[i]:
//   - \s*[\r\n]+ gives runes back until [\r\n]+ can start: it ends after
//     the run's last \r or \n (a \r\n pair ends after the \n).
//   - \s+(?!\S) takes the whole run at the end of the text; otherwise it
//     gives back the run's last rune, before which the lookahead sees a
//     space, provided a rune remains.
//   - \s+ takes the run.
func spaceEnd(s string, i int, newlines bool) int {
	k, lastNewlineEnd, lastStart := i, -1, i
	for k < len(s) {
		c, w := classAt(s, k)
		if c&classSpace == 0 {
			break
		}
		if s[k] == '\r' || s[k] == '\n' {
			lastNewlineEnd = k + 1
		}
		lastStart = k
		k += w
	}
	switch {
	case k == i:
		return i
	case newlines && lastNewlineEnd > 0:
		return lastNewlineEnd
	case k == len(s) || lastStart == i:
		return k
	}
	return lastStart
}
