package pipeline

import (
	"path/filepath"
	"strings"
)

// Kinds of document: how a document's content is read (its HTML or
// Markdown reduced to text) before it is chunked, and the "type" metadata of
// every chunk. The API (/v1/documents) and ingest accept these, named or
// found from a file name (DocumentKind).
const (
	KindMarkdown = "markdown"
	KindHTML     = "html"
	KindText     = "text"
)

// DocumentKind is the kind of a file name by its extension (.md and
// .markdown, .html and .htm, .txt), "" for any other.
func DocumentKind(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".md", ".markdown":
		return KindMarkdown
	case ".html", ".htm":
		return KindHTML
	case ".txt":
		return KindText
	}
	return ""
}

// ValidKind says whether kind is one of the document kinds.
func ValidKind(kind string) bool {
	return kind == KindMarkdown || kind == KindHTML || kind == KindText
}

// DocumentInput is one document given by its content rather than a path, as
// the API receives it and the ingester stores it.
type DocumentInput struct {
	// DocID names the document; a stored document of that id is replaced.
	DocID string
	// Kind is KindMarkdown, KindHTML or KindText.
	Kind string
	// Title, when set, replaces the title found in the content.
	Title string
	// Body is the raw content.
	Body []byte
	// File, when Body is nil, names a file holding the raw content (an
	// upload spooled to disk). It is read when the document's turn comes,
	// so a batch holds one raw document in memory at a time.
	File string
	// Metadata is stored with every chunk (and can be filtered on).
	Metadata map[string]string
	// Source says where the document came from (e.g. "api").
	Source string
}

// DocumentResult says what storing a document did.
type DocumentResult struct {
	DocID     string `json:"doc_id"`
	Title     string `json:"title"`
	Chunks    int    `json:"chunks"`
	Unchanged bool   `json:"unchanged"`
}
