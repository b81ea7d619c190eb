package retrieval

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"ragtime/pipeline"
)

// FuzzHTMLExtract feeds arbitrary documents to the HTML extraction. It
// never panics; a document the parser refuses is a *pipeline.ValidationError
// naming the document (a 400 at the API, never a 500); otherwise the title
// and text are valid UTF-8, tidy (no blank runs, no trailing white space),
// the title one line, and for input without markup the words are exactly
// the input's.
func FuzzHTMLExtract(f *testing.F) {
	for _, s := range []string{
		"<html><head><title>T</title></head><body><h1>H</h1><p>one <b>two</b></p><pre>  a\n  b</pre></body></html>",
		"plain words only", "<script>x()</script><style>p{}</style><p>kept</p>", "<table><tr><td>a<td>b</table>",
		"&amp; &lt;tag&gt; &#0; &#xD800;", "\xff\xfe<p>\x00</p>", "<br><br><br>x<br>",
		strings.Repeat("<div>", 600) + "deep" + strings.Repeat("</div>", 600),
		strings.Repeat("<div>", 500) + "fine" + strings.Repeat("</div>", 500),
		"<svg><math><template><p>x</p></template></math></svg>", "<title>\n a \n b \n</title>",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		ex, err := extract(pipeline.KindHTML, "doc.html", []byte(src))
		if err != nil {
			var ve *pipeline.ValidationError
			if !errors.As(err, &ve) || ve.Field != "doc.html" || ve.Code != "document_unreadable" || ve.Message == "" {
				t.Fatalf("error %v (%T): want a ValidationError naming doc.html", err, err)
			}
			return
		}
		if !utf8.ValidString(ex.title) || !utf8.ValidString(ex.text) {
			t.Fatalf("title %q / text %q: not UTF-8", ex.title, ex.text)
		}
		if ex.title == "" || strings.ContainsAny(ex.title, "\n\r") {
			t.Fatalf("title %q: empty or more than one line", ex.title)
		}
		if ex.text != strings.TrimSpace(ex.text) || strings.Contains(ex.text, "\n\n\n") {
			t.Fatalf("text %q is not tidy", ex.text)
		}
		for _, l := range strings.Split(ex.text, "\n") {
			if l != strings.TrimRight(l, " \t") {
				t.Fatalf("line %q ends in white space", l)
			}
		}
		// Without markup, entities, NUL or carriage returns (which the
		// parser rewrites), extraction keeps exactly the words.
		if utf8.ValidString(src) && !strings.ContainsAny(src, "<&\x00\r\ufeff") {
			if got, want := strings.Fields(ex.text), strings.Fields(src); !slices.Equal(got, want) {
				t.Fatalf("plain text %q became %q", src, ex.text)
			}
		}
	})
}
