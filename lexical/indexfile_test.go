package lexical

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strings"
	"testing"
)

func fileTestIndex() (*Index, [][]string) {
	x := NewIndex()
	i := int32(0)
	queries := SyntheticCorpus(300, func(words []string) {
		x.Add(Analyse("Title "+words[0], strings.Join(words, " ")), i*3)
		i++
	})
	x.Delete(5)
	x.Delete(17)
	return x, queries
}

func TestIndexFileRoundTrip(t *testing.T) {
	t.Parallel()
	x, queries := fileTestIndex()
	stamp := FileStamp{Generation: 7, Source: 0xdeadbeef}
	var buf bytes.Buffer
	if err := x.WriteFile(&buf, stamp); err != nil {
		t.Fatal(err)
	}
	y, err := ReadFile(buf.Bytes(), stamp)
	if err != nil {
		t.Fatal(err)
	}
	if y.Len() != x.Len() || y.Docs() != x.Docs() || y.Dead() != x.Dead() || y.AvgLen() != x.AvgLen() || y.PostingBytes() != x.PostingBytes() {
		t.Fatalf("read back len %d docs %d dead %d avg %v bytes %d, wrote %d %d %d %v %d",
			y.Len(), y.Docs(), y.Dead(), y.AvgLen(), y.PostingBytes(), x.Len(), x.Docs(), x.Dead(), x.AvgLen(), x.PostingBytes())
	}
	for _, q := range queries {
		if got, want := y.Search(q, 20, nil), x.Search(q, 20, nil); !reflect.DeepEqual(got, want) || len(want) == 0 {
			t.Fatalf("query %q: read back %v, wrote %v", q, got, want)
		}
	}
	// Adding to and deleting from the loaded index keeps the other terms'
	// postings (which share the file's buffer) intact.
	words := append([]string(nil), queries[0]...)
	for range 50 {
		x.Add(Analyse("", strings.Join(words, " ")), 9999)
		y.Add(Analyse("", strings.Join(words, " ")), 9999)
	}
	x.Delete(3)
	y.Delete(3)
	for _, q := range queries {
		if got, want := y.Search(q, 20, nil), x.Search(q, 20, nil); !reflect.DeepEqual(got, want) {
			t.Fatalf("after adds, query %q: loaded %v, built %v", q, got, want)
		}
	}
}

func TestIndexFileStaleAndCorrupt(t *testing.T) {
	t.Parallel()
	x := NewIndex()
	x.Add(Analyse("Cats", "the cat sat on the mat"), 0)
	x.Add(Analyse("Dogs", "a dog barked at the cat"), 1)
	stamp := FileStamp{Generation: 3, Source: 42}
	var buf bytes.Buffer
	if err := x.WriteFile(&buf, stamp); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	for _, other := range []FileStamp{{Generation: 4, Source: 42}, {Generation: 3, Source: 43}} {
		if _, err := ReadFile(data, other); !errors.Is(err, ErrFileStale) {
			t.Errorf("stamp %+v: err %v, want ErrFileStale", other, err)
		}
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x40
		if _, err := ReadFile(bad, stamp); !errors.Is(err, ErrFileCorrupt) {
			t.Fatalf("byte %d flipped: err %v, want ErrFileCorrupt", i, err)
		}
	}
	for n := range len(data) {
		if _, err := ReadFile(data[:n], stamp); !errors.Is(err, ErrFileCorrupt) {
			t.Fatalf("cut to %d bytes: err %v, want ErrFileCorrupt", n, err)
		}
	}
}

// TestAnalyzerVersionPinned fails when Terms gives other terms than the
// analyzer of AnalyzerVersion did: saved index files would then hold terms
// no query finds. Bump AnalyzerVersion and put the new sum here.
func TestAnalyzerVersionPinned(t *testing.T) {
	t.Parallel()
	const text = `Configuring the Caches of the SERVERS: reconnecting, reconnected; 42x 首都 Ünïcödé naïve café
	"quoted" don't can't it's e-mail user@example.com 3.14 1,000 v2.0 HTTP/1.1 running runs ran easily fairly
	généralement Straße ΑΒΓ данные 東京タワー 한국어 emoji🙂 x_y CamelCase snake_case tab	separated`
	h := fnv.New64a()
	for _, term := range Terms(text) {
		fmt.Fprintf(h, "%s\x00", term)
	}
	fmt.Fprintf(h, "%d", TitleBoost)
	const want = 0xa1c884984d58bc31
	if got := h.Sum64(); got != want || AnalyzerVersion != 1 {
		t.Fatalf("the analyzer's terms changed (sum %#x, version %d pinned with %#x): bump AnalyzerVersion and pin the new sum; terms now %q",
			got, AnalyzerVersion, uint64(want), Terms(text))
	}
}

// BenchmarkIndexFileRead reads the file of a 100k-chunk synthetic index
// (150 words a chunk from a 40,000-word Zipf vocabulary, through Analyse)
// against rebuilding it from the chunks' text: what an open of the
// embedded store pays for its lexical leg either way.
func BenchmarkIndexFileRead(b *testing.B) {
	const n = 100_000
	var texts []string
	SyntheticCorpus(n, func(words []string) { texts = append(texts, strings.Join(words, " ")) })
	x := NewIndex()
	for i, t := range texts {
		x.Add(Analyse("", t), int32(i))
	}
	var buf bytes.Buffer
	stamp := FileStamp{Generation: 1, Source: 2}
	if err := x.WriteFile(&buf, stamp); err != nil {
		b.Fatal(err)
	}
	b.Run("file", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadFile(buf.Bytes(), stamp); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len())/n, "file-B/chunk")
	})
	b.Run("rebuild", func(b *testing.B) {
		for b.Loop() {
			y := NewIndex()
			for i, t := range texts {
				y.Add(Analyse("", t), int32(i))
			}
		}
	})
}
