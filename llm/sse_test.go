package llm

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"ragtime"
	"ragtime/pipeline"
)

// TestStreamReaderFraming covers event-stream shapes seen from OpenAI-
// compatible servers, read directly (the HTTP path is covered by the
// replay tests).
func TestStreamReaderFraming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		stream   string
		want     []string // delta texts; nil with wantCode set means error
		wantCode string
		usage    ragtime.Usage
	}{
		{
			name:   "multi-line data is joined with a newline",
			stream: "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
			want:   []string{"a"},
		},
		{
			name:   "last event without its blank line, finish_reason and no [DONE]",
			stream: "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}",
			want:   []string{"x"},
		},
		{
			name:   "escapes decoded, decoder reused across chunks",
			stream: `data: {"choices":[{"delta":{"content":"a\"b"}}]}` + "\n\n" + `data: {"choices":[{"delta":{"content":"c\\nd"}}]}` + "\n\n" + `data: {"choices":[{"delta":{"content":"e"}}]}` + "\n\ndata: [DONE]\n\n",
			want:   []string{`a"b`, `c\nd`, "e"},
		},
		{
			name:   "usage chunk with null choices (vLLM), empty choices without usage (Azure filter results)",
			stream: `data: {"choices":[],"prompt_filter_results":[]}` + "\n\n" + `data: {"choices":[{"delta":{"content":"ok"}}]}` + "\n\n" + `data: {"choices":null,"usage":{"prompt_tokens":3,"completion_tokens":1}}` + "\n\ndata: [DONE]\n\n",
			want:   []string{"ok"},
			usage:  ragtime.Usage{PromptTokens: 3, CompletionTokens: 1},
		},
		{
			name:   "content and reasoning in one delta: reasoning first",
			stream: `data: {"choices":[{"delta":{"reasoning_content":"think","content":"say"}}]}` + "\n\ndata: [DONE]\n\n",
			want:   []string{"think", "say"},
		},
		{
			name:   "structured reasoning field is not text",
			stream: `data: {"choices":[{"delta":{"reasoning":{"summary":"x"},"content":"y"}}]}` + "\n\ndata: [DONE]\n\n",
			want:   []string{"y"},
		},
		{
			name:     "trailing data after the JSON value",
			stream:   `data: {"choices":[{"delta":{"content":"a"}}]} junk` + "\n\n",
			wantCode: CodeBadStream,
		},
		{
			name:     "null chunk",
			stream:   "data: null\n\n",
			wantCode: CodeBadStream,
		},
		{
			name:     "not an object",
			stream:   "data: 42\n\n",
			wantCode: CodeBadStream,
		},
		{
			name:     "empty body",
			stream:   "",
			wantCode: CodeBadStream,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gen pipeline.Generation
			var got []string
			sr := streamReader{gen: &gen, emit: func(d pipeline.Delta) error {
				got = append(got, d.Text)
				return nil
			}}
			err := sr.run(strings.NewReader(tt.stream))
			if tt.wantCode != "" {
				var pe *ragtime.Error
				if !errors.As(err, &pe) || pe.Code != tt.wantCode {
					t.Fatalf("err = %v, want code %s", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("deltas %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(gen.Usage, tt.usage) {
				t.Errorf("usage %+v, want %+v", gen.Usage, tt.usage)
			}
		})
	}
}
