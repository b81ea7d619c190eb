package retrieval

import (
	"strings"
	"unicode/utf8"
)

// splitSeparators are the chunker's split points, best first: Markdown
// headings, paragraphs, lines, sentences, words, and at last characters.
var splitSeparators = []string{"\n# ", "\n## ", "\n### ", "\n\n", "\n", ". ", " ", ""}

// chunker splits text recursively at splitSeparators into chunks of at
// most size characters (runes) that share up to overlap characters with
// their neighbour, keeping each separator at the start of the piece it
// precedes. It is langchaingo's textsplitter.RecursiveCharacter (v0.1.14,
// MIT, Travis Cline) with KeepSeparator and a rune count, written out here
// because that package imports a Markdown parser, an LLM client's types
// and a tokenizer that serve never uses; split_test.go checks the two
// agree.
type chunker struct {
	size, overlap int
}

// split returns text's chunks, trimmed of surrounding white space; none
// is empty.
func (c chunker) split(text string) []string {
	return c.splitAt(text, splitSeparators)
}

func (c chunker) splitAt(text string, separators []string) []string {
	// The first separator text holds ("" always matches) and the finer
	// ones after it, for pieces still too long.
	separator, finer := separators[len(separators)-1], []string(nil)
	for i, s := range separators {
		if s == "" || strings.Contains(text, s) {
			separator, finer = s, separators[i+1:]
			break
		}
	}
	pieces := strings.Split(text, separator)
	for i := 1; i < len(pieces); i++ {
		pieces[i] = separator + pieces[i]
	}
	var chunks, short []string
	for _, p := range pieces {
		if utf8.RuneCountInString(p) < c.size {
			short = append(short, p)
			continue
		}
		if len(short) > 0 {
			chunks = append(chunks, c.merge(short)...)
			short = nil
		}
		if len(finer) == 0 {
			chunks = append(chunks, p)
		} else {
			chunks = append(chunks, c.splitAt(p, finer)...)
		}
	}
	if len(short) > 0 {
		chunks = append(chunks, c.merge(short)...)
	}
	return chunks
}

// merge joins consecutive short pieces into chunks of up to size
// characters; each new chunk starts with the last pieces of the one before
// that fit in overlap.
func (c chunker) merge(pieces []string) []string {
	var chunks, cur []string
	total := 0
	emit := func() {
		if doc := strings.TrimSpace(strings.Join(cur, "")); doc != "" {
			chunks = append(chunks, doc)
		}
	}
	for _, p := range pieces {
		n := utf8.RuneCountInString(p)
		if total+n > c.size && len(cur) > 0 {
			emit()
			for len(cur) > 0 && (total > c.overlap || (total+n > c.size && total > 0)) {
				total -= utf8.RuneCountInString(cur[0])
				cur = cur[1:]
			}
		}
		cur = append(cur, p)
		total += n
	}
	emit()
	return chunks
}
