package eval

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

// Question is one labelled question (a line of a qrels file), with the ids
// of the documents that answer it (empty when no relevance is known) and,
// optionally, of the chunks that do.
type Question struct {
	Text     string   `json:"question"`
	Relevant []string `json:"relevant,omitempty"`
	// RelevantChunks, when set, are the chunk ids ("<doc_id>#<index>", as
	// search results name them) that answer the question; the question is
	// then judged on chunks instead of documents.
	RelevantChunks []string `json:"relevant_chunks,omitempty"`
	// Line is the question's line in its file (1-based).
	Line int `json:"line"`
}

// Labelled says whether q carries relevance labels (doc or chunk ids).
func (q Question) Labelled() bool { return len(q.Relevant) > 0 || len(q.RelevantChunks) > 0 }

// Load reads questions from a JSONL file (one
// {"question": "...", "relevant": ["doc_id", ...], "relevant_chunks": ["doc_id#0", ...]}
// object per line; both lists optional) or a TSV file (question, a tab,
// comma-separated doc ids, optionally a tab and comma-separated chunk ids).
// The format follows the extension (.jsonl, .json, .ndjson or .tsv);
// another extension is sniffed from the first line that is not blank or a
// # comment. Blank lines and lines starting with # are skipped. A bad line
// is an error naming the file, the line and the field.
func Load(path string) ([]Question, error) {
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
		Chunks   []string `json:"relevant_chunks"`
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Question{}, fmt.Errorf("field %q must be a JSON %s", te.Field, te.Type.Kind())
		}
		return Question{}, fmt.Errorf("not a JSON object with \"question\", \"relevant\" and \"relevant_chunks\": %w", err)
	}
	if dec.More() {
		return Question{}, errors.New("more than one JSON value on the line")
	}
	if v.Question == nil || strings.TrimSpace(*v.Question) == "" {
		return Question{}, errors.New("\"question\" is missing or empty")
	}
	rel, err := cleanIDs("relevant", "doc", v.Relevant)
	if err != nil {
		return Question{}, err
	}
	chunks, err := cleanIDs("relevant_chunks", "chunk", v.Chunks)
	if err != nil {
		return Question{}, err
	}
	return Question{Text: strings.TrimSpace(*v.Question), Relevant: rel, RelevantChunks: chunks}, nil
}

func parseTSVLine(line string) (Question, error) {
	fields := strings.Split(line, "\t")
	if len(fields) > 3 {
		return Question{}, fmt.Errorf("%d tab-separated fields; want at most 3 (question, comma-separated doc ids, comma-separated chunk ids)", len(fields))
	}
	text := strings.TrimSpace(fields[0])
	if text == "" {
		return Question{}, errors.New("the question (first field) is empty")
	}
	q := Question{Text: text}
	var err error
	if len(fields) >= 2 {
		if q.Relevant, err = cleanIDs("field 2 (doc ids)", "doc", strings.Split(fields[1], ",")); err != nil {
			return Question{}, err
		}
	}
	if len(fields) == 3 {
		if q.RelevantChunks, err = cleanIDs("field 3 (chunk ids)", "chunk", strings.Split(fields[2], ",")); err != nil {
			return Question{}, err
		}
	}
	return q, nil
}

// cleanIDs trims the ids of field, drops empty ones from a trailing comma
// and rejects duplicates and, for chunk ids, ids without "#<index>".
func cleanIDs(field, kind string, ids []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		id = strings.TrimSpace(id)
		if id == "" {
			continue
		}
		if seen[id] {
			return nil, fmt.Errorf("%s: relevant %s id %q is listed twice", field, kind, id)
		}
		if kind == "chunk" && !isChunkID(id) {
			return nil, fmt.Errorf("%s: %q is not a chunk id (want <doc_id>#<index>, as search results name chunks)", field, id)
		}
		seen[id] = true
		out = append(out, id)
	}
	return out, nil
}

// isChunkID says whether id has the shape of a chunk id: a doc id, "#" and
// a whole number (retrieval.ChunkID).
func isChunkID(id string) bool {
	i := strings.LastIndexByte(id, '#')
	if i <= 0 || i == len(id)-1 {
		return false
	}
	for _, r := range id[i+1:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// CheckIDs returns an error naming the line and the id of every relevant doc
// id (or the document of a relevant chunk id) that is not in known, the ids
// of the indexed documents: a label that names no indexed page would count
// as a miss for every configuration and silently lower every figure.
func CheckIDs(qs []Question, known map[string]bool) error {
	var bad []string
	for _, q := range qs {
		for _, id := range q.Relevant {
			if !known[id] {
				bad = append(bad, fmt.Sprintf("line %d: relevant doc id %q", q.Line, id))
			}
		}
		for _, id := range q.RelevantChunks {
			if doc := id[:strings.LastIndexByte(id, '#')]; !known[doc] {
				bad = append(bad, fmt.Sprintf("line %d: relevant chunk id %q (document %q)", q.Line, id, doc))
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	n := len(bad)
	if n > 10 {
		bad = append(bad[:10], fmt.Sprintf("and %d more", n-10))
	}
	return fmt.Errorf("%d relevant ids are not in the index: %s", n, strings.Join(bad, "; "))
}
