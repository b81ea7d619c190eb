package retrieval

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"ragtime/pipeline"
)

// extracted is a file reduced to what gets chunked.
type extracted struct {
	title string
	text  string
}

// extract returns the title and the text of a file's content. Content that
// is not text (see notText) is refused with a *pipeline.ValidationError
// naming the document; otherwise a few invalid UTF-8 bytes (a Latin-1
// accent) are replaced by U+FFFD and a leading byte-order mark is dropped.
func extract(kind, name string, content []byte) (extracted, error) {
	if why := notText(content); why != "" {
		return extracted{}, &pipeline.ValidationError{Field: name, Code: "document_unreadable",
			Message: fmt.Sprintf("%s is not text: %s", name, why)}
	}
	src := string(content)
	if !utf8.ValidString(src) {
		src = strings.ToValidUTF8(src, "\uFFFD")
	}
	src = strings.TrimPrefix(src, "\uFEFF")
	src = strings.ReplaceAll(src, "\r\n", "\n")
	base := filepath.Base(name)
	switch kind {
	case pipeline.KindHTML:
		title, text, err := htmlText(src)
		if err != nil {
			return extracted{}, unreadableHTML(name, err)
		}
		if title == "" {
			title = base
		}
		return extracted{title: title, text: text}, nil
	case pipeline.KindMarkdown:
		title := markdownTitle(src)
		if title == "" {
			title = base
		}
		return extracted{title: title, text: strings.TrimSpace(src)}, nil
	default:
		return extracted{title: base, text: strings.TrimSpace(src)}, nil
	}
}

// Limits of what extract takes for text: beyond MaxInvalidUTF8Share of
// invalid UTF-8 bytes the text would be mostly U+FFFD, beyond
// MaxControlShare of control characters it is a binary file.
const (
	MaxInvalidUTF8Share = 0.25
	MaxControlShare     = 0.01
)

// notText says why content is not text, or "" when it is: a NUL byte (a
// binary file, or UTF-16 text), more than MaxInvalidUTF8Share of its bytes
// invalid UTF-8 (another encoding, or binary), or more than MaxControlShare
// of its characters controls other than tab, line feed, vertical tab, form
// feed, carriage return and escape (the ANSI colours of a log). Every
// path that ingests content goes through extract, hence this check.
func notText(content []byte) string {
	if i := bytes.IndexByte(content, 0); i >= 0 {
		return fmt.Sprintf("it holds a NUL byte (at offset %d): a binary file, or UTF-16 text (convert it to UTF-8)", i)
	}
	var runes, invalid, control int
	for b := content; len(b) > 0; runes++ {
		r, n := utf8.DecodeRune(b)
		b = b[n:]
		switch {
		case r == utf8.RuneError && n == 1:
			invalid++
		case r < 0x20 && r != '\t' && r != '\n' && r != '\v' && r != '\f' && r != '\r' && r != 0x1b,
			r >= 0x7f && r <= 0x9f:
			control++
		}
	}
	if float64(invalid) > MaxInvalidUTF8Share*float64(len(content)) {
		return fmt.Sprintf("%d of its %d bytes are not valid UTF-8 (more than %.0f%%): a binary file, or text in another encoding (convert it to UTF-8)",
			invalid, len(content), 100*MaxInvalidUTF8Share)
	}
	if float64(control) > MaxControlShare*float64(runes) {
		return fmt.Sprintf("%d of its %d characters are control characters (more than %.0f%%): a binary file",
			control, runes, 100*MaxControlShare)
	}
	return ""
}

// MaxHTMLDepth is how deeply the HTML parser (golang.org/x/net/html) lets
// elements nest; it refuses a deeper document.
const MaxHTMLDepth = 512

// unreadableHTML explains an HTML document the parser refused. It is the
// document's fault, not the server's: a *pipeline.ValidationError naming
// the document, which the API answers with 400.
func unreadableHTML(name string, err error) error {
	msg := fmt.Sprintf("%s: the HTML parser refused it: %v", name, err)
	if strings.Contains(err.Error(), "open stack of elements exceeds") {
		msg = fmt.Sprintf("%s: the HTML nests elements deeper than %d levels, the parser's limit; flatten it or send its text as kind text", name, MaxHTMLDepth)
	}
	return &pipeline.ValidationError{Field: name, Code: "document_unreadable", Message: msg}
}

var (
	atxHeading    = regexp.MustCompile(`^ {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$`)
	setextH1      = regexp.MustCompile(`^ {0,3}=+[ \t]*$`)
	frontTitle    = regexp.MustCompile(`^title:[ \t]*(.+?)[ \t]*$`)
	codeFenceOpen = regexp.MustCompile("^ {0,3}(```|~~~)")
)

// markdownTitle returns the title of a Markdown document: a `title:` in YAML
// front matter, else the first level-one heading (`# Title` or a line
// underlined with `===`) outside code fences, else "". A full Markdown
// parser is not needed for this one line, so it is scanned by hand.
func markdownTitle(src string) string {
	lines := strings.Split(src, "\n")
	start := 0
	if len(lines) > 0 && strings.TrimSpace(lines[0]) == "---" {
		for i := 1; i < len(lines); i++ {
			l := strings.TrimSpace(lines[i])
			if l == "---" || l == "..." {
				start = i + 1
				break
			}
			if m := frontTitle.FindStringSubmatch(l); m != nil {
				if t := strings.Trim(m[1], `"'`); t != "" {
					return t
				}
			}
		}
	}
	fence := ""
	for i := start; i < len(lines); i++ {
		l := lines[i]
		if m := codeFenceOpen.FindStringSubmatch(l); m != nil {
			switch {
			case fence == "":
				fence = m[1]
			case fence == m[1]:
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		if m := atxHeading.FindStringSubmatch(l); m != nil {
			return strings.TrimSpace(m[1])
		}
		if t := strings.TrimSpace(l); t != "" && i+1 < len(lines) && setextH1.MatchString(lines[i+1]) {
			return t
		}
	}
	return ""
}

// htmlText reduces an HTML document to its <title> and its visible text.
// Script, style, noscript, template and the head (except the title) are
// dropped; block elements become line breaks and paragraphs blank lines, so
// sentences of neighbouring blocks do not run together and the chunker can
// split on them.
func htmlText(src string) (title, text string, err error) {
	doc, err := html.Parse(strings.NewReader(src))
	if err != nil {
		return "", "", err
	}
	var b strings.Builder
	var h1 string
	// breaks is the number of line breaks owed before the next text: block
	// boundaries raise it, text pays it, so neighbouring boundaries merge
	// instead of piling up blank lines.
	breaks := 0
	owe := func(n int) { breaks = max(breaks, n) }
	write := func(s string) {
		if breaks > 0 {
			if strings.TrimSpace(s) == "" {
				return // white space between blocks
			}
			if b.Len() > 0 {
				b.WriteString(strings.Repeat("\n", breaks))
			}
			breaks = 0
			s = strings.TrimLeft(s, " ")
		}
		b.WriteString(s)
	}
	var walk func(n *html.Node, pre bool)
	walk = func(n *html.Node, pre bool) {
		switch n.Type {
		case html.TextNode:
			if pre {
				write(n.Data)
			} else {
				write(collapseSpace(n.Data))
			}
			return
		case html.ElementNode:
			switch n.DataAtom {
			case atom.Script, atom.Style, atom.Noscript, atom.Template,
				atom.Svg, atom.Math, atom.Iframe, atom.Object, atom.Canvas:
				return
			case atom.Title:
				if title == "" {
					title = strings.TrimSpace(collapseSpace(nodeText(n)))
				}
				return
			case atom.Head:
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && c.DataAtom == atom.Title {
						walk(c, false)
					}
				}
				return
			case atom.Br:
				breaks = min(breaks+1, 2)
				if b.Len() == 0 {
					breaks = 0
				}
				return
			case atom.H1:
				if h1 == "" {
					h1 = strings.TrimSpace(collapseSpace(nodeText(n)))
				}
			case atom.Pre:
				pre = true
			case atom.Td, atom.Th:
				if n.PrevSibling != nil {
					write(" ")
				}
			}
		case html.CommentNode, html.DoctypeNode:
			return
		}
		brk := blockBreaks(n)
		owe(brk)
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, pre)
		}
		owe(brk)
	}
	walk(doc, false)
	if title == "" {
		title = h1
	}
	return title, tidyLines(b.String()), nil
}

// blockBreaks is how many line breaks separate an element from its
// neighbours in the text: 2 (a blank line) around paragraphs and sections,
// 1 around other blocks, 0 for inline elements.
func blockBreaks(n *html.Node) int {
	if n.Type != html.ElementNode {
		return 0
	}
	switch n.DataAtom {
	case atom.P, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6,
		atom.Pre, atom.Blockquote, atom.Table, atom.Ul, atom.Ol, atom.Dl,
		atom.Section, atom.Article, atom.Header, atom.Footer, atom.Main,
		atom.Aside, atom.Nav, atom.Figure, atom.Hr, atom.Form, atom.Fieldset:
		return 2
	case atom.Div, atom.Li, atom.Tr, atom.Dt, atom.Dd, atom.Figcaption,
		atom.Caption, atom.Address, atom.Details, atom.Summary, atom.Body,
		atom.Option, atom.Legend:
		return 1
	}
	return 0
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// collapseSpace turns every run of white space into one space, as a browser
// renders text outside <pre>.
func collapseSpace(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range s {
		switch r {
		case ' ', '\t', '\n', '\r', '\f':
			space = true
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	if space {
		b.WriteByte(' ')
	}
	return b.String()
}

// tidyLines trims every line and keeps at most one blank line in a row.
func tidyLines(s string) string {
	lines := strings.Split(s, "\n")
	out := make([]string, 0, len(lines))
	blank := true // drops leading blank lines
	for _, l := range lines {
		l = strings.TrimRight(l, " \t")
		if strings.TrimSpace(l) == "" {
			if !blank {
				out = append(out, "")
			}
			blank = true
			continue
		}
		// Leading space is an artefact of collapsed white space (this also
		// drops indentation inside <pre>, which retrieval does not need).
		out = append(out, strings.TrimLeft(l, " \t"))
		blank = false
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}
