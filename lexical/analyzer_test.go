package lexical

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// wordsReference is Words as it was written before WordScanner: a string
// builder per text, a string per word.
func wordsReference(text string) []string {
	words := []string{}
	var b strings.Builder
	flush := func() {
		if b.Len() > 0 {
			words = append(words, b.String())
			b.Reset()
		}
	}
	for _, r := range text {
		if r < utf8.RuneSelf {
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
		default:
			flush()
		}
	}
	flush()
	return words
}

// analyzerTexts mix ASCII, apostrophes, accents, CJK, invalid UTF-8 and
// words met again (from the analyzer's cache the second time).
var analyzerTexts = []string{
	"",
	"Configuring the caches: CONFIGURED caches, configuration's cache.",
	"Don't stop-me now 42x; don’t STOP",
	"TTFT是首字延迟 and TTFT again",
	"Ünïcödé Straße ÉCOLE école naïve façade",
	"bad \xff\xfe bytes\x00here \xe2\x80 cut",
	"a an the of to in is it that",
	"Running runners ran; run, running! The runner's runs.",
}

// TestScannerAndAnalyzerMatchTheReference: WordScanner yields the words
// of the string-per-word scanner, and TermAnalyzer (cached, reused across
// texts) the terms and counts of stemming each non-stop word afresh.
func TestScannerAndAnalyzerMatchTheReference(t *testing.T) {
	t.Parallel()
	a := NewTermAnalyzer()
	for round := range 2 {
		for _, text := range analyzerTexts {
			want := wordsReference(text)
			if got := Words(text); !slices.Equal(got, want) {
				t.Errorf("Words(%q) = %q, want %q", text, got, want)
			}
			var wantTerms []string
			for _, w := range want {
				if !IsStopword(w) {
					wantTerms = append(wantTerms, stem(w))
				}
			}
			var got []string
			a.Each(text, func(term string) { got = append(got, term) })
			if !slices.Equal(got, wantTerms) || !slices.Equal(Terms(text), wantTerms) {
				t.Errorf("round %d: terms of %q = %q (Terms %q), want %q", round, text, got, Terms(text), wantTerms)
			}
			title := analyzerTexts[(round+1)%len(analyzerTexts)]
			wantCounts := map[string]int{}
			for _, w := range Terms(title) {
				wantCounts[w] += TitleBoost
			}
			for _, w := range wantTerms {
				wantCounts[w]++
			}
			for _, d := range []Doc{a.Analyse(text, title), Analyse(title, text), a.Analyse(text, "", title)} {
				gotCounts := map[string]int{}
				n := 0
				for i, term := range d.terms {
					gotCounts[term] = int(d.tfs[i])
					n += int(d.tfs[i])
				}
				if !maps.Equal(gotCounts, wantCounts) || int(d.len) != n {
					t.Errorf("round %d: Analyse(%q, %q) counts %v (len %d), want %v", round, title, text, gotCounts, d.len, wantCounts)
				}
			}
		}
	}
}

// BenchmarkAnalyse: one chunk of about 1,000 characters, as the store
// analyses each chunk it stores.
func BenchmarkAnalyse(b *testing.B) {
	text := strings.Repeat("The planner estimates the cost of each join order; VACUUM reclaims storage. ", 13)
	b.ReportAllocs()
	for b.Loop() {
		Analyse("Chapter 14. Performance Tips", text)
	}
}
