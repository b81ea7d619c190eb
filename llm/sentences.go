package llm

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// splitSentences splits document text into sentences for the extractive
// generator. It reads the text as Markdown-ish prose: fenced code blocks and
// headings are dropped, blank lines end paragraphs, list items, quotes and
// table rows start new ones, and wrapped lines within a paragraph are joined.
// Paragraphs are then cut after ., ! and ? when followed by a space (a
// period not when it closes an abbreviation such as "e.g." or an initial,
// or when a lower-case word follows; never inside numbers such as 3.5), and
// right after the CJK marks 。！？.
func splitSentences(text string) []string {
	var out []string
	for _, p := range paragraphs(text) {
		out = appendSentences(out, p)
	}
	return out
}

// paragraphs turns text into one-line paragraphs, dropping code and headings.
func paragraphs(text string) []string {
	var (
		out   []string
		cur   strings.Builder
		fence string
	)
	flush := func() {
		if cur.Len() > 0 {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	for line := range strings.Lines(text) {
		t := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		switch {
		case strings.HasPrefix(t, "```"), strings.HasPrefix(t, "~~~"):
			flush()
			fence = t[:3]
			continue
		case t == "":
			flush()
			continue
		case strings.HasPrefix(t, "#"):
			flush()
			continue
		case isTableRule(t):
			flush()
			continue
		}
		if body, ok := blockStart(t); ok {
			flush()
			t = body
		}
		if t == "" {
			continue
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(t)
		if strings.HasPrefix(strings.TrimSpace(line), "|") {
			flush() // each table row stands alone
		}
	}
	flush()
	return out
}

// blockStart reports whether a trimmed line starts a Markdown block (list
// item, quote, table row) and returns it without its marker.
func blockStart(t string) (string, bool) {
	switch {
	case strings.HasPrefix(t, "- "), strings.HasPrefix(t, "* "), strings.HasPrefix(t, "+ "):
		return strings.TrimSpace(t[2:]), true
	case strings.HasPrefix(t, ">"):
		return strings.TrimSpace(strings.TrimLeft(t, "> ")), true
	case strings.HasPrefix(t, "|"):
		cells := strings.Split(strings.Trim(t, "| "), "|")
		var kept []string
		for _, c := range cells {
			if c = strings.TrimSpace(c); c != "" {
				kept = append(kept, c)
			}
		}
		return strings.Join(kept, "; "), true
	}
	// Ordered list items: "1. " or "1) ".
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i > 0 && i+1 < len(t) && (t[i] == '.' || t[i] == ')') && t[i+1] == ' ' {
		return strings.TrimSpace(t[i+2:]), true
	}
	return t, false
}

// isTableRule reports a Markdown table separator row such as |---|:--:|.
func isTableRule(t string) bool {
	if !strings.HasPrefix(t, "|") || !strings.Contains(t, "-") {
		return false
	}
	return strings.Trim(t, "|-: ") == ""
}

// abbreviations never end a sentence when followed by a space.
var abbreviations = map[string]bool{
	"e.g": true, "i.e": true, "cf": true, "vs": true, "etc": true, "approx": true,
	"mr": true, "mrs": true, "ms": true, "dr": true, "prof": true, "st": true,
	"fig": true, "no": true, "al": true, "resp": true, "incl": true, "ca": true,
}

// appendSentences cuts one paragraph into sentences.
func appendSentences(out []string, p string) []string {
	start := 0
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		end := i + size
		switch r {
		case '。', '！', '？':
			end = skipClosers(p, end)
			out = appendSentence(out, p[start:end])
			start, i = end, end
			continue
		case '.', '!', '?':
			end = skipClosers(p, end)
			if end == len(p) || p[end] == ' ' || p[end] == '\t' {
				if r != '.' || !isAbbreviation(p[start:i], p[end:]) {
					out = appendSentence(out, p[start:end])
					start, i = end, end
					continue
				}
			}
		}
		i = end
	}
	return appendSentence(out, p[start:])
}

// skipClosers moves past repeated sentence marks and closing quotes or
// brackets that belong to the sentence just ended.
func skipClosers(p string, i int) int {
	for i < len(p) {
		r, size := utf8.DecodeRuneInString(p[i:])
		if !strings.ContainsRune(`.!?"')]”’」』）。！？`, r) {
			break
		}
		i += size
	}
	return i
}

// isAbbreviation reports whether the word before a period (ending at the end
// of before) is an abbreviation or an initial, so the period ends no sentence.
func isAbbreviation(before, after string) bool {
	w := before
	if i := strings.LastIndexAny(before, " \t(\"'"); i >= 0 {
		w = before[i+1:]
	}
	// A period followed by a lower-case word ends no sentence ("e.g. a",
	// "Then... nothing", unknown abbreviations).
	next := strings.TrimLeft(after, " \t")
	if r, _ := utf8.DecodeRuneInString(next); unicode.IsLower(r) {
		return true
	}
	w = strings.ToLower(w)
	if w == "etc" {
		// "etc." ends a sentence when a capitalised word follows.
		r, _ := utf8.DecodeRuneInString(next)
		return !unicode.IsUpper(r)
	}
	if abbreviations[w] {
		return true
	}
	// A single letter: an initial ("J. R. Smith") or "e.g"-style pieces.
	return utf8.RuneCountInString(w) == 1 && unicode.IsLetter([]rune(w)[0])
}

// appendSentence appends a trimmed sentence, dropping Markdown emphasis and
// fragments without any letter or digit.
func appendSentence(out []string, s string) []string {
	s = strings.TrimSpace(s)
	if s == "" {
		return out
	}
	if strings.Contains(s, "**") {
		s = strings.ReplaceAll(s, "**", "")
	}
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) < 0 {
		return out
	}
	return append(out, s)
}
