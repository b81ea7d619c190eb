package sweep

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// Question is one question of a sweep, with the ids of the documents that
// answer it (empty when no relevance is known).
type Question struct {
	Text     string   `json:"question"`
	Relevant []string `json:"relevant,omitempty"`
	// Line is the question's line in its file (1-based).
	Line int `json:"line"`
}

// LoadQuestions reads questions from a JSONL file (one
// {"question": "...", "relevant": ["doc_id", ...]} object per line) or a TSV
// file (question, a tab, then comma-separated doc ids; the ids are
// optional). The format follows the extension (.jsonl, .json, .ndjson or
// .tsv); another extension is sniffed from the first line that is not blank
// or a # comment. Blank lines and lines starting with # are skipped. A bad
// line is an error naming the file and the line.
func LoadQuestions(path string) ([]Question, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading questions: %w", err)
	}
	jsonl := false
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".json", ".ndjson":
		jsonl = true
	case ".tsv":
	default:
		for _, l := range bytes.Split(b, []byte("\n")) {
			l = bytes.TrimSpace(l)
			if len(l) == 0 || l[0] == '#' {
				continue
			}
			jsonl = l[0] == '{'
			break
		}
	}
	var qs []Question
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Text()
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !utf8.ValidString(line) {
			return nil, fmt.Errorf("%s:%d: the line is not valid UTF-8", path, n)
		}
		var q Question
		if jsonl {
			q, err = parseJSONLine(line)
		} else {
			q, err = parseTSVLine(strings.TrimRight(raw, "\r"))
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		q.Line = n
		qs = append(qs, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", path, n+1, err)
	}
	if len(qs) == 0 {
		return nil, fmt.Errorf("%s: no questions (want JSONL {\"question\", \"relevant\"} or TSV question<TAB>doc_id,...)", path)
	}
	return qs, nil
}

func parseJSONLine(line string) (Question, error) {
	var v struct {
		Question *string  `json:"question"`
		Relevant []string `json:"relevant"`
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Question{}, fmt.Errorf("field %q must be a JSON %s", te.Field, te.Type.Kind())
		}
		return Question{}, fmt.Errorf("not a JSON object with \"question\" and \"relevant\": %w", err)
	}
	if dec.More() {
		return Question{}, errors.New("more than one JSON value on the line")
	}
	if v.Question == nil || strings.TrimSpace(*v.Question) == "" {
		return Question{}, errors.New("\"question\" is missing or empty")
	}
	rel, err := cleanIDs(v.Relevant)
	if err != nil {
		return Question{}, err
	}
	return Question{Text: strings.TrimSpace(*v.Question), Relevant: rel}, nil
}

func parseTSVLine(line string) (Question, error) {
	fields := strings.Split(line, "\t")
	if len(fields) > 2 {
		return Question{}, fmt.Errorf("%d tab-separated fields; want 2 (question, then comma-separated doc ids)", len(fields))
	}
	text := strings.TrimSpace(fields[0])
	if text == "" {
		return Question{}, errors.New("the question (first field) is empty")
	}
	var rel []string
	if len(fields) == 2 {
		var err error
		if rel, err = cleanIDs(strings.Split(fields[1], ",")); err != nil {
			return Question{}, err
		}
	}
	return Question{Text: text, Relevant: rel}, nil
}

// cleanIDs trims the ids, drops empty ones from a trailing comma and
// rejects duplicates.
func cleanIDs(ids []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		if seen[id] {
			return nil, fmt.Errorf("relevant doc id %q is listed twice", id)
		}
		seen[id] = true
		out = append(out, id)
	}
	return out, nil
}
