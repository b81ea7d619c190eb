package eval

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file, content string
		want                []Question
		err                 string
	}{
		{name: "jsonl", file: "q.jsonl", content: "{\"question\": \" a \", \"relevant\": [\"x.md\", \" y.md\"]}\n\n# note\n{\"question\": \"b\"}\n",
			want: []Question{{Text: "a", Relevant: []string{"x.md", "y.md"}, Line: 1}, {Text: "b", Line: 4}}},
		{name: "tsv", file: "q.tsv", content: "a\tx.md, y.md,\r\nb\n",
			want: []Question{{Text: "a", Relevant: []string{"x.md", "y.md"}, Line: 1}, {Text: "b", Line: 2}}},
		{name: "sniffed jsonl", file: "q.txt", content: "# c\n{\"question\": \"a\"}\n", want: []Question{{Text: "a", Line: 2}}},
		{name: "sniffed tsv", file: "q.txt", content: "a\tx\n", want: []Question{{Text: "a", Relevant: []string{"x"}, Line: 1}}},
		{name: "empty", file: "q.jsonl", content: "\n# only\n", err: "no questions"},
		{name: "bad json", file: "q.jsonl", content: "{\"question\": \"a\"}\n{\"question\": \n", err: "q.jsonl:2: not a JSON object"},
		{name: "unknown field", file: "q.jsonl", content: "{\"q\": \"a\"}\n", err: "q.jsonl:1: not a JSON object"},
		{name: "wrong type", file: "q.jsonl", content: "{\"question\": \"a\", \"relevant\": \"x\"}\n", err: "q.jsonl:1: field \"relevant\" must be a JSON slice"},
		{name: "no question", file: "q.jsonl", content: "{\"relevant\": [\"x\"]}\n", err: "q.jsonl:1: \"question\" is missing"},
		{name: "two values", file: "q.jsonl", content: "{\"question\": \"a\"} {}\n", err: "q.jsonl:1: more than one JSON value"},
		{name: "duplicate id", file: "q.tsv", content: "a\tx,x\n", err: "q.tsv:1: field 2 (doc ids): relevant doc id \"x\" is listed twice"},
		{name: "four fields", file: "q.tsv", content: "ok\na\tb\tc#1\td\n", err: "q.tsv:2: 4 tab-separated fields"},
		{name: "empty question", file: "q.tsv", content: "\tx\n", err: "q.tsv:1: the question (first field) is empty"},
		{name: "bad utf8", file: "q.tsv", content: "a\xff\n", err: "q.tsv:1: the line is not valid UTF-8"},
		{name: "jsonl chunks", file: "q.jsonl", content: "{\"question\": \"a\", \"relevant\": [\"x.md\"], \"relevant_chunks\": [\"x.md#2\", \"y#1\"]}\n",
			want: []Question{{Text: "a", Relevant: []string{"x.md"}, RelevantChunks: []string{"x.md#2", "y#1"}, Line: 1}}},
		{name: "tsv chunks", file: "q.tsv", content: "# c\na\t\tx.md#0,x.md#12\n",
			want: []Question{{Text: "a", RelevantChunks: []string{"x.md#0", "x.md#12"}, Line: 2}}},
		{name: "not a chunk id", file: "q.jsonl", content: "{\"question\": \"a\"}\n{\"question\": \"b\", \"relevant_chunks\": [\"x.md\"]}\n",
			err: "q.jsonl:2: relevant_chunks: \"x.md\" is not a chunk id"},
		{name: "chunk index not a number", file: "q.tsv", content: "a\tx\tx#one\n", err: "q.tsv:1: field 3 (chunk ids): \"x#one\" is not a chunk id"},
		{name: "duplicate chunk", file: "q.tsv", content: "a\t\tx#1,x#1\n", err: "q.tsv:1: field 3 (chunk ids): relevant chunk id \"x#1\" is listed twice"},
		{name: "duplicate doc", file: "q.jsonl", content: "{\"question\": \"a\", \"relevant\": [\"x\", \"x\"]}\n", err: "q.jsonl:1: relevant: relevant doc id \"x\" is listed twice"},
		{name: "chunks wrong type", file: "q.jsonl", content: "{\"question\": \"a\", \"relevant_chunks\": 3}\n", err: "q.jsonl:1: field \"relevant_chunks\" must be a JSON slice"},
		{name: "question wrong type", file: "q.jsonl", content: "{\"question\": 3}\n", err: "q.jsonl:1: field \"question\" must be a JSON string"},
		{name: "four fields", file: "q.tsv", content: "a\tb\tc#1\td\n", err: "q.tsv:1: 4 tab-separated fields"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), c.file)
			if err := os.WriteFile(p, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Load(p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %+v", got)
			}
			for i, g := range got {
				w := c.want[i]
				if g.Text != w.Text || g.Line != w.Line || !slices.Equal(g.Relevant, w.Relevant) || !slices.Equal(g.RelevantChunks, w.RelevantChunks) {
					t.Errorf("question %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Error("a missing file loaded")
	}
}
