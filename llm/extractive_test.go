package llm

import (
	"context"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"ragtime"
	"ragtime/pipeline"
)

var testSources = []pipeline.Source{
	{Rank: 1, ChunkID: "ttft#0", Title: "TTFT", Text: "# Time to first token\n\nTime to first token (TTFT) is what a user feels. Once the first token shows,\nthey wait for the rest. Streaming does not make the model faster; it moves the user's anchor from end-to-end time to TTFT."},
	{Rank: 2, ChunkID: "prefill#0", Title: "Prefill", Text: "TTFT is set by input length, not output length. Prefill reads the whole prompt in one parallel pass, and its cost grows about quadratically with prompt tokens. Decode then emits one token at a time, e.g. 30 tokens per second on a 3.5 GHz CPU."},
	{Rank: 3, ChunkID: "conn#0", Title: "Connections", Text: "- A reused keep-alive connection skips DNS, TCP and TLS.\n- The first request on a cold client pays them, often tens to hundreds of milliseconds."},
}

var citation = regexp.MustCompile(`\[(\d+)\]`)

// runExtractive returns the answer text and the deltas.
func runExtractive(t *testing.T, ctx context.Context, req pipeline.GenerateRequest) (string, []pipeline.Delta, pipeline.Generation, error) {
	t.Helper()
	got, gen, err := collect(t, NewExtractive(), ctx, req)
	var b strings.Builder
	for _, d := range got {
		b.WriteString(d.Text)
	}
	return b.String(), got, gen, err
}

func TestExtractiveAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		question  string
		sources   []pipeline.Source
		wantFirst string // the answer starts with this sentence and citation
		wantNot   string // and does not contain this
	}{
		{
			name: "prefill", question: "How does the prefill cost grow with the prompt?", sources: testSources,
			wantFirst: "Prefill reads the whole prompt in one parallel pass, and its cost grows about quadratically with prompt tokens. [2]",
			wantNot:   "penguin",
		},
		{
			name: "keep-alive from a list item", question: "What does a reused keep-alive connection skip?", sources: testSources,
			wantFirst: "A reused keep-alive connection skips DNS, TCP and TLS. [3]",
			wantNot:   "# Time",
		},
		{
			name: "wrapped line joined, heading dropped", question: "What happens once the first token shows?", sources: testSources,
			wantFirst: "Once the first token shows, they wait for the rest. [1]",
			wantNot:   "Time to first token Time",
		},
		{
			name: "abbreviation and decimal kept whole", question: "How fast does decode emit tokens?", sources: testSources,
			wantFirst: "Decode then emits one token at a time, e.g. 30 tokens per second on a 3.5 GHz CPU. [2]",
		},
		{
			name: "ranks default to positions", question: "What does a reused keep-alive connection skip?",
			sources:   []pipeline.Source{{Text: "Unrelated words about gardening and soil."}, {Text: "A reused keep-alive connection skips DNS, TCP and TLS."}},
			wantFirst: "A reused keep-alive connection skips DNS, TCP and TLS. [2]",
		},
		{
			name: "chinese", question: "什么是首字延迟？",
			sources:   []pipeline.Source{{Rank: 1, Text: "预填充一次读取整个提示。首字延迟是用户感受到的等待时间！解码逐个生成词元。"}},
			wantFirst: "首字延迟是用户感受到的等待时间！ [1]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, deltas, gen, err := runExtractive(t, context.Background(), pipeline.GenerateRequest{Question: tt.question, Sources: tt.sources, MaxTokens: 200})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if !strings.HasPrefix(answer, tt.wantFirst) {
				t.Errorf("answer\n%q\ndoes not start with\n%q", answer, tt.wantFirst)
			}
			if tt.wantNot != "" && strings.Contains(answer, tt.wantNot) {
				t.Errorf("answer %q contains %q", answer, tt.wantNot)
			}
			for _, m := range citation.FindAllStringSubmatch(answer, -1) {
				n, _ := strconv.Atoi(m[1])
				if n < 1 || n > len(tt.sources) {
					t.Errorf("answer cites [%d], only %d sources exist", n, len(tt.sources))
				}
			}
			words := 0
			for i, d := range deltas {
				if strings.TrimSpace(d.Text) == "" || strings.Contains(strings.TrimSuffix(d.Text, " "), " ") {
					t.Errorf("delta %d = %q, want one word and its following space", i, d.Text)
				}
				if i == len(deltas)-1 && strings.HasSuffix(d.Text, " ") {
					t.Errorf("last delta %q ends with a space", d.Text)
				}
				if d.Reasoning {
					t.Errorf("delta %d flagged as reasoning", i)
				}
				if !citation.MatchString(d.Text) {
					words++
				}
			}
			if gen.Usage.CompletionTokens != words || gen.Chunks != len(deltas) {
				t.Errorf("usage %+v chunks %d, want %d words in %d deltas", gen.Usage, gen.Chunks, words, len(deltas))
			}
			if gen.Usage.PromptTokens != 0 {
				t.Errorf("PromptTokens = %d; the extractive generator has no tokenizer and leaves it to the pipeline", gen.Usage.PromptTokens)
			}
			if gen.Provider != ProviderExtractive || gen.Model != ProviderExtractive || !gen.Conn.Reused {
				t.Errorf("provider %q model %q reused %v", gen.Provider, gen.Model, gen.Conn.Reused)
			}
			if !gen.GotConn.Equal(gen.RequestStart) || !gen.WroteRequest.Equal(gen.RequestStart) {
				t.Errorf("connect and write times differ from the call start: %+v", gen)
			}
			if !gen.FirstToken.Equal(deltas[0].At) || !gen.LastToken.Equal(deltas[len(deltas)-1].At) {
				t.Errorf("FirstToken/LastToken do not match the first/last delta")
			}
		})
	}
}

func TestExtractiveNotFound(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		question string
		sources  []pipeline.Source
	}{
		{name: "unrelated question", question: "How do penguins keep their eggs warm in Antarctica?", sources: testSources},
		{name: "no sources", question: "What is prefill?"},
		{name: "empty question", question: "  ", sources: testSources},
		{name: "one weak word of many", question: "Which soil, fertiliser and watering schedule suit tomato plants grown in the first week?", sources: testSources},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			answer, _, gen, err := runExtractive(t, context.Background(), pipeline.GenerateRequest{Question: tt.question, Sources: tt.sources, MaxTokens: 100})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if answer != NotFoundAnswer {
				t.Errorf("answer = %q, want %q", answer, NotFoundAnswer)
			}
			if gen.Usage.CompletionTokens != len(strings.Fields(NotFoundAnswer)) {
				t.Errorf("CompletionTokens = %d", gen.Usage.CompletionTokens)
			}
		})
	}
}

func TestExtractiveMaxTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		question  string
		maxTokens int
		want      string
	}{
		{"How does the prefill cost grow with the prompt?", 4, "Prefill reads the whole [2]"},
		{"How does the prefill cost grow with the prompt?", 1, "Prefill [2]"},
		{"How do penguins keep their eggs warm?", 3, "I could not"},
		{"什么是首字延迟？", 3, "首字延 [1]"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			sources := testSources
			if strings.HasPrefix(tt.question, "什") {
				sources = []pipeline.Source{{Rank: 1, Text: "首字延迟是用户感受到的等待时间。"}}
			}
			answer, _, gen, err := runExtractive(t, context.Background(), pipeline.GenerateRequest{Question: tt.question, Sources: sources, MaxTokens: tt.maxTokens})
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if answer != tt.want {
				t.Errorf("answer = %q, want %q", answer, tt.want)
			}
			if gen.Usage.CompletionTokens != tt.maxTokens {
				t.Errorf("CompletionTokens = %d, want %d", gen.Usage.CompletionTokens, tt.maxTokens)
			}
		})
	}
}

func TestExtractiveDeterministic(t *testing.T) {
	t.Parallel()
	req := pipeline.GenerateRequest{Question: "What is TTFT?", Sources: testSources, MaxTokens: 200}
	first, _, _, err := runExtractive(t, context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if first == NotFoundAnswer || len(citation.FindAllString(first, -1)) < 2 {
		t.Fatalf("want a multi-sentence answer, got %q", first)
	}
	for i := range 20 {
		again, _, _, err := runExtractive(t, context.Background(), req)
		if err != nil || again != first {
			t.Fatalf("run %d = %q (%v), want %q", i, again, err, first)
		}
	}
}

func TestExtractiveStops(t *testing.T) {
	t.Parallel()
	req := pipeline.GenerateRequest{Question: "How does the prefill cost grow with the prompt?", Sources: testSources, MaxTokens: 100}
	t.Run("cancelled between words", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		_, err := generate(ctx, NewExtractive(), req, func(pipeline.Delta) error {
			n++
			if n == 2 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v does not wrap context.Canceled", err)
		}
		checkError(t, err, CodeCancelled, ragtime.StageLLMDecode)
		if n != 2 {
			t.Errorf("emitted %d deltas, want 2", n)
		}
	})
	t.Run("already cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got, gen, err := collect(t, NewExtractive(), ctx, req)
		if !errors.Is(err, context.Canceled) || len(got) != 0 || !gen.FirstToken.IsZero() {
			t.Fatalf("err %v, %d deltas", err, len(got))
		}
	})
	t.Run("emit error", func(t *testing.T) {
		stop := errors.New("client gone")
		n := 0
		_, err := generate(context.Background(), NewExtractive(), req, func(pipeline.Delta) error {
			n++
			return stop
		})
		if err != stop || n != 1 {
			t.Fatalf("err %v after %d emits, want the emit error after 1", err, n)
		}
	})
}

func TestSplitSentences(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"punctuation", "One two. Three four! Five six? Seven", []string{"One two.", "Three four!", "Five six?", "Seven"}},
		{"abbreviations and decimals", "Use e.g. a 3.5 GB model, i.e. small. Dr. Smith agrees etc. and more. Then stop.", []string{"Use e.g. a 3.5 GB model, i.e. small.", "Dr. Smith agrees etc. and more.", "Then stop."}},
		{"etc before a capital", "Fonts, colours etc. The end.", []string{"Fonts, colours etc.", "The end."}},
		{"closing quotes and ellipsis", `He said "stop." Then... nothing?! Really.`, []string{`He said "stop."`, "Then... nothing?!", "Really."}},
		{"cjk", "首字延迟很重要。预填充呢？解码！", []string{"首字延迟很重要。", "预填充呢？", "解码！"}},
		{"wrapped lines join", "a line that wraps\nonto the next one.\n\nNew paragraph", []string{"a line that wraps onto the next one.", "New paragraph"}},
		{"crlf", "First line\r\n\r\nSecond line.", []string{"First line", "Second line."}},
		{"lists, headings, code, tables", "## Heading\n- item one\n- item two\n1. step one\n```\ncode. here.\n```\n| a | b |\n|---|---|\n| x | y |\n> quoted", []string{"item one", "item two", "step one", "a; b", "x; y", "quoted"}},
		{"url and version", "See example.com/v1.2 for details. Done", []string{"See example.com/v1.2 for details.", "Done"}},
		{"no letters", "--- ... !!", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := splitSentences(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("splitSentences(%q) =\n%q\nwant\n%q", tt.in, got, tt.want)
			}
		})
	}
}

// TestExtractiveStopsBeforeAStopSequence: the extractive answer ends before
// the first stop sequence it would hold (mid-word, at a citation), as
// OpenAI's stop does; a sequence it does not hold changes nothing.
func TestExtractiveStopsBeforeAStopSequence(t *testing.T) {
	t.Parallel()
	q := "How does the prefill cost grow with the prompt?"
	full, _, _, err := runExtractive(t, context.Background(), pipeline.GenerateRequest{Question: q, Sources: testSources})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stop []string
		want string
	}{
		{[]string{"quadrat", "whole"}, "Prefill reads the "},
		{[]string{"[2]"}, "Prefill reads the whole prompt in one parallel pass, and its cost grows about quadratically with prompt tokens. "},
		{[]string{"Prefill"}, ""},
		{[]string{"penguin"}, full},
	} {
		got, _, _, err := runExtractive(t, context.Background(), pipeline.GenerateRequest{Question: q, Sources: testSources, Stop: tc.stop})
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("stop %q: answer %q, want %q", tc.stop, got, tc.want)
		}
	}
}
