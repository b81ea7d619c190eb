package tokens

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// The oracle: tiktoken-go itself, whose EncodeOrdinary Counter replaced, and
// its patterns (tiktoken-go v0.1.8's encoding.go) run on the regexp2 engine
// it runs them on, to compare pieces as well as ids (a piece boundary in the
// wrong place can still merge to the same ids).
var oraclePatterns = map[string]string{
	"o200k_base": strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"),
	"cl100k_base": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	"p50k_base":   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
	"r50k_base":   `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
}

type oracle struct {
	tk      *tiktoken.Tiktoken
	pattern *regexp2.Regexp
}

var (
	oracleLoader sync.Once
	oraclesMu    sync.Mutex
	oracles      = map[string]*oracle{}
)

func loadOracle(tb testing.TB, name string) *oracle {
	tb.Helper()
	oracleLoader.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	oraclesMu.Lock()
	defer oraclesMu.Unlock()
	if o, ok := oracles[name]; ok {
		return o
	}
	tk, err := tiktoken.GetEncoding(name)
	if err != nil {
		tb.Fatalf("load the oracle's %s: %v", name, err)
	}
	o := &oracle{tk: tk, pattern: regexp2.MustCompile(oraclePatterns[name], regexp2.None)}
	oracles[name] = o
	return o
}

// pieces splits text with the regular expression, as tiktoken-go does.
func (o *oracle) pieces(text string) []string {
	var out []string
	m, _ := o.pattern.FindStringMatch(text)
	for m != nil {
		out = append(out, m.String())
		m, _ = o.pattern.FindNextMatch(m)
	}
	return out
}

func newCounter(tb testing.TB, name string) *Counter {
	tb.Helper()
	c, err := New(name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// checkAgainstOracle fails t unless c splits, encodes, counts and decodes
// text as the oracle does.
func checkAgainstOracle(t testing.TB, c *Counter, o *oracle, text string) {
	t.Helper()
	var got []string
	c.enc.eachPiece(text, func(p string) { got = append(got, p) })
	want := o.pieces(text)
	if !slices.Equal(got, want) {
		at := 0
		for at < min(len(got), len(want)) && got[at] == want[at] {
			at++
		}
		t.Fatalf("%s pieces of %q differ from piece %d:\n got %q\nwant %q", c.name, text, at, got[at:min(len(got), at+5)], want[at:min(len(want), at+5)])
	}
	ids, wantIDs := c.Encode(text), o.tk.EncodeOrdinary(text)
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("%s Encode(%q) = %v, want %v", c.name, text, ids, wantIDs)
	}
	if n := c.Count(text); n != len(wantIDs) {
		t.Fatalf("%s Count(%q) = %d, want %d", c.name, text, n, len(wantIDs))
	}
	if s, want := c.Decode(ids), o.tk.Decode(wantIDs); s != want {
		t.Fatalf("%s Decode(Encode(%q)) = %q, want %q", c.name, text, s, want)
	}
}

// trickyTexts seed the fuzz targets and TestTrickyTexts: the places where a
// hand-written matcher and the backtracking engine could part.
var trickyTexts = []string{
	"",
	"hello world",
	// contractions in mixed case, alone, after letters, digits and spaces
	"I'M here, we'Ll go, THEY'RE 'S 'sup don'T you'Ve it'D'", "'", "''s", "'l", "'LL'lL", "x'Re'rE", "5's 'R", " 's",
	"Can'T\u00a0'T", "ſ's 'ſ K'd", "ǅ'S", "A'", "'\u0301s",
	// digit runs, other numbers
	"1234567 12 1", "x1234y", "١٢٣٤٥", "½⅓¼ Ⅻ ²³", " 123 4567", "3.14159", "1,000,000",
	// CJK, scripts without case, marks
	"首个令牌的时间，我们。", "日本語のテキストです", "한국어 텍스트", "प्रीफ़िल समय", "مرحبا بالعالم", "ไทย",
	"e\u0301", "\u0301a", "a\u0308\u0301", "\u0301\u0302", " \u0301", "X\u0301Y", "\u0301", "!\u0301x", "ʰello ʰ", "ーー", "ǅemal ǅ",
	"ABCdef ABC DEF aBC Ab", "HELLO'S", "İstanbul ΣΊΣΥΦΟΣ", "ΑΒΓ αβγ", "ÆØÅ",
	// emoji
	"👍🏽 ok", "👨‍👩‍👧 family", "🇫🇷🇩🇪", "a👍b", "😀😀😀",
	// CRLF and whitespace runs before non-space, trailing spaces
	"a\r\n\r\n  b", "  \t x", "\n \n x", "x\r\ny", "\r\n", "\r\r\n\n", "a  \n  b", "hello   ", "   ", "\t\t", " \u00a0 x",
	"x\u0085y \u2028 z\u3000w", "\v\f x", "  ", " ", "a \r\n", "\n\n\n\ttab", "\t\tfunc main() {\n\treturn\n}\n",
	// '/' after punctuation, punctuation runs
	"!/", "?!\n/", "http://x/y", "**/\n/", ".../../x", " /*comment*/", "a,\r\n/b", "<|endoftext|>", "#!/bin/sh", "==> ", "- [x] done",
	"{\"a\": [1, 2]}", "C++ & C#", "$100.00", "e.g., i.e.", "'quoted' \"double\"",
	// invalid UTF-8
	"\xff\xfe", "a\xe2\x82", "\xed\xa0\x80", "\xc0\xaf/", "ok\xffok", "\xef\xbf\xbd", "'\xff", " \xff\xfe x",
	// long pieces
	strings.Repeat(" ", 100) + "x", strings.Repeat("ab", 70), strings.Repeat("首", 80), strings.Repeat("=", 90),
}

func TestTrickyTexts(t *testing.T) {
	t.Parallel()
	for _, name := range Encodings {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, o := newCounter(t, name), loadOracle(t, name)
			for _, s := range trickyTexts {
				checkAgainstOracle(t, c, o, s)
			}
		})
	}
}

// TestCorpusMatchesOracle compares every encoding with the oracle over the
// repository's docs and test data (the first 8 KiB of binary files: invalid
// UTF-8).
func TestCorpusMatchesOracle(t *testing.T) {
	t.Parallel()
	var texts []string
	for _, root := range []string{"../../docs", "../../llm/testdata", "../../api/testdata", "../../retrieval/testdata", "../../sweep/testdata", "../../cmd/ragtime/testdata"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.Contains(path, "node_modules") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !utf8.Valid(b) && len(b) > 8<<10 {
				b = b[:8<<10]
			}
			texts = append(texts, string(b))
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatalf("read the corpus: %v", err)
		}
	}
	if len(texts) < 20 {
		t.Fatalf("corpus has %d files; the paths are wrong", len(texts))
	}
	for _, name := range Encodings {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, o := newCounter(t, name), loadOracle(t, name)
			for _, s := range texts {
				checkAgainstOracle(t, c, o, s)
			}
		})
	}
}

func fuzzAgainstOracle(f *testing.F, name string) {
	for _, s := range trickyTexts {
		f.Add(s)
	}
	c, o := newCounter(f, name), loadOracle(f, name)
	f.Fuzz(func(t *testing.T, text string) {
		checkAgainstOracle(t, c, o, text)
	})
}

func FuzzO200kAgainstOracle(f *testing.F)  { fuzzAgainstOracle(f, "o200k_base") }
func FuzzCl100kAgainstOracle(f *testing.F) { fuzzAgainstOracle(f, "cl100k_base") }
func FuzzP50kAgainstOracle(f *testing.F)   { fuzzAgainstOracle(f, "p50k_base") }
func FuzzR50kAgainstOracle(f *testing.F)   { fuzzAgainstOracle(f, "r50k_base") }

// TestContractionFolding checks what contractionEnd assumes of the unicode
// tables: regexp2 folds case with unicode.ToLower, and no rune outside ASCII
// lowers to an apostrophe or a contraction's letter.
func TestContractionFolding(t *testing.T) {
	t.Parallel()
	for r := rune(utf8.RuneSelf); r <= unicode.MaxRune; r++ {
		if l := unicode.ToLower(r); strings.ContainsRune("'strevmld", l) {
			t.Errorf("unicode.ToLower(%U) = %q: contractionEnd must fold it", r, l)
		}
	}
}

// TestRuneClassTable checks the BMP table against the unicode tables.
func TestRuneClassTable(t *testing.T) {
	t.Parallel()
	newCounter(t, "")
	for r := rune(0); r < 0x10000; r++ {
		if got, want := bmpClasses[r], classifyRune(r); got != want {
			t.Fatalf("class of %U = %b, want %b", r, got, want)
		}
	}
}

func TestDecodeSpecialAndUnknown(t *testing.T) {
	t.Parallel()
	for _, name := range Encodings {
		c, o := newCounter(t, name), loadOracle(t, name)
		ids := []int{-1, 0, 50256, 50257, 50280, 50281, 100256, 100257, 100258, 100276, 199997, 199998, 199999, 200018, 1 << 30}
		for _, id := range ids {
			if got, want := c.Decode([]int{id}), o.tk.Decode([]int{id}); got != want {
				t.Errorf("%s Decode(%d) = %q, want %q", name, id, got, want)
			}
		}
	}
}

func ExampleCounter_Count() {
	c, _ := New("o200k_base")
	fmt.Println(c.Count("Prefill reads the whole prompt in one parallel pass."))
	// Output: 11
}

// mixPalette has a rune or two of every class the patterns tell apart, in
// and out of the BMP, with the contractions' letters in both cases and
// invalid UTF-8; TestRandomMixes strings them together at random, reaching
// combinations that the byte-level fuzzer seldom builds.
var mixPalette = []string{
	"a", "z", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D", "'", "'", "A", "Z",
	"ǅ", "ʰ", "ー", "首", "א", "\u0301", "\u0903", "\u20dd", "ß", "İ", "ſ", "K", "Σ", "ς",
	"0", "9", "١", "½", "Ⅻ", "²",
	" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u0085", "\u2028", "\u3000", "\v", "\f",
	"/", "/", ".", "!", ",", "-", "\"", "<|", "\u200d", "😀", "\U0001f3fd", "\U0001d400", "\U0001d41a", "\U00020000",
	"\xff", "\xe2\x82",
}

func randomMix(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(24) {
		b.WriteString(mixPalette[rng.IntN(len(mixPalette))])
	}
	return b.String()
}

func TestRandomMixes(t *testing.T) {
	t.Parallel()
	mixes := 1500
	if n, err := strconv.Atoi(os.Getenv("TOKENS_MIXES")); err == nil {
		mixes = n // e.g. TOKENS_MIXES=200000 for a long run
	}
	for _, name := range Encodings {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, o := newCounter(t, name), loadOracle(t, name)
			rng := rand.New(rand.NewPCG(uint64(len(name)), uint64(mixes)))
			for range mixes {
				checkAgainstOracle(t, c, o, randomMix(rng))
			}
		})
	}
}
