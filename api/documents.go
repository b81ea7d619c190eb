package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"ragtime/pipeline"
)

// Document kinds accepted by /v1/documents.
const (
	KindMarkdown = "markdown"
	KindHTML     = "html"
	KindText     = "text"
)

// DocumentInput is one document to store.
type DocumentInput struct {
	ID       string
	Title    string
	Kind     string
	Body     []byte
	Metadata map[string]string
}

// DocumentResult says what storing a document did.
type DocumentResult struct {
	DocID     string `json:"doc_id"`
	Title     string `json:"title"`
	Chunks    int    `json:"chunks"`
	Unchanged bool   `json:"unchanged"`
}

// Documents is the document store behind /v1/documents: it chunks, embeds
// and stores (replacing a document of the same id in one step), deletes
// and lists. A nil Documents answers 503.
type Documents interface {
	PutDocument(ctx context.Context, in DocumentInput) (DocumentResult, error)
	DeleteDocument(ctx context.Context, id string) (bool, error)
	ListDocuments(ctx context.Context) ([]pipeline.DocumentInfo, error)
}

// ErrReadOnly is what a Documents returns when the store cannot be written
// (serve --read-only); it is answered 503.
var ErrReadOnly = errors.New("the document store is read-only")

// kindByExt maps a file extension to a kind.
func kindByExt(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown":
		return KindMarkdown
	case ".html", ".htm":
		return KindHTML
	case ".txt":
		return KindText
	}
	return ""
}

func (s *server) documents() (Documents, error) {
	if s.deps.Documents == nil {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "no document store is configured"}
	}
	return s.deps.Documents, nil
}

// validID checks a document id: 1–512 bytes of UTF-8 without control characters.
func validID(id, field string) error {
	if id == "" {
		return badRequest(field, "id_required", field+" is required")
	}
	if len(id) > 512 || !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return badRequest(field, "id_invalid", field+" must be 1–512 bytes of UTF-8 without control characters")
	}
	return nil
}

// handlePutDocuments serves POST /v1/documents: a JSON document
// {id, title, text, metadata, kind} or multipart/form-data files (each
// file's name is its id; a "metadata" field of JSON applies to all).
func (s *server) handlePutDocuments(c echo.Context) error {
	docs, err := s.documents()
	if err != nil {
		return err
	}
	r := c.Request()
	ct, params, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	limit := s.deps.MaxDocumentBytes
	var inputs []DocumentInput
	switch ct {
	case echo.MIMEApplicationJSON:
		var body struct {
			ID       string            `json:"id"`
			Title    string            `json:"title"`
			Text     *string           `json:"text"`
			Kind     string            `json:"kind"`
			Metadata map[string]string `json:"metadata"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(c.Response(), r.Body, limit+4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return documentBodyError(err, limit)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return badRequest("", "body_invalid", "the body must hold exactly one JSON object")
		}
		if err := validID(body.ID, "id"); err != nil {
			return err
		}
		if body.Text == nil {
			return badRequest("text", "text_required", "text is required (the document's content)")
		}
		if int64(len(*body.Text)) > limit {
			return badRequest("text", "document_too_large", fmt.Sprintf("text is %d bytes; at most %d are accepted (--max-document-bytes)", len(*body.Text), limit))
		}
		kind := body.Kind
		if kind == "" {
			kind = kindByExt(body.ID)
		}
		if kind == "" {
			kind = KindText
		}
		if kind != KindMarkdown && kind != KindHTML && kind != KindText {
			return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_kind", Field: "kind",
				Message: fmt.Sprintf("kind %q is not supported: use markdown, html or text", kind)}
		}
		inputs = append(inputs, DocumentInput{ID: body.ID, Title: body.Title, Kind: kind, Body: []byte(*body.Text), Metadata: body.Metadata})
	case echo.MIMEMultipartForm:
		if params["boundary"] == "" {
			return badRequest("", "bad_multipart", "multipart/form-data without a boundary")
		}
		if inputs, err = s.readMultipart(c, limit); err != nil {
			return err
		}
	default:
		return &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("Content-Type %q is not accepted: send application/json {id, title, text, metadata} or multipart/form-data files", ct)}
	}
	for _, in := range inputs {
		for k := range in.Metadata {
			if k == "" {
				return badRequest("metadata", "metadata_invalid", "metadata has an empty key")
			}
		}
	}
	results := make([]DocumentResult, 0, len(inputs))
	for _, in := range inputs {
		res, err := docs.PutDocument(r.Context(), in)
		if err != nil {
			return fmt.Errorf("storing document %q: %w", in.ID, err)
		}
		results = append(results, res)
	}
	return c.JSON(http.StatusOK, map[string]any{"documents": results})
}

// multipartFilesPerRequest bounds a multipart body to this many
// --max-document-bytes.
const multipartFilesPerRequest = 8

// readMultipart reads every file part of a multipart body, refusing an
// unsupported extension (415) or a file over limit (400) before anything
// is stored.
func (s *server) readMultipart(c echo.Context, limit int64) ([]DocumentInput, error) {
	// Each file is bounded by limit; the whole body too, since every file is
	// held in memory until all are read.
	total := multipartFilesPerRequest * limit
	c.Request().Body = http.MaxBytesReader(c.Response(), c.Request().Body, total)
	tooBig := func(err error) error {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: fmt.Sprintf("the multipart body is larger than %d bytes (%d × --max-document-bytes); send fewer files per request", total, multipartFilesPerRequest)}
		}
		return nil
	}
	mr, err := c.Request().MultipartReader()
	if err != nil {
		return nil, badRequest("", "bad_multipart", "reading the multipart body: "+err.Error())
	}
	var inputs []DocumentInput
	var meta map[string]string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			if e := tooBig(err); e != nil {
				return nil, e
			}
			return nil, badRequest("", "bad_multipart", "reading the multipart body: "+err.Error())
		}
		name := part.FileName()
		if name == "" {
			if part.FormName() == "metadata" {
				b, _ := io.ReadAll(io.LimitReader(part, 64<<10))
				if err := json.Unmarshal(b, &meta); err != nil {
					return nil, badRequest("metadata", "metadata_invalid", "the metadata field must be a JSON object of strings")
				}
			}
			continue
		}
		name = path.Base(strings.ReplaceAll(name, "\\", "/"))
		if err := validID(name, "file name"); err != nil {
			return nil, err
		}
		kind := kindByExt(name)
		if kind == "" {
			return nil, &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_file_type", Field: name,
				Message: fmt.Sprintf("%s: unsupported file type; send .md, .markdown, .txt, .html or .htm files", name)}
		}
		body, err := io.ReadAll(io.LimitReader(part, limit+1))
		if err != nil {
			if e := tooBig(err); e != nil {
				return nil, e
			}
			return nil, badRequest(name, "bad_multipart", fmt.Sprintf("reading %s: %v", name, err))
		}
		if int64(len(body)) > limit {
			return nil, badRequest(name, "document_too_large", fmt.Sprintf("%s is larger than %d bytes (--max-document-bytes)", name, limit))
		}
		inputs = append(inputs, DocumentInput{ID: name, Kind: kind, Body: body})
	}
	if len(inputs) == 0 {
		return nil, badRequest("", "no_files", "the multipart body holds no file")
	}
	for i := range inputs {
		inputs[i].Metadata = meta
	}
	return inputs, nil
}

// handleDeleteDocument serves DELETE /v1/documents/:id.
func (s *server) handleDeleteDocument(c echo.Context) error {
	docs, err := s.documents()
	if err != nil {
		return err
	}
	id := c.Param("id")
	if err := validID(id, "id"); err != nil {
		return err
	}
	ok, err := docs.DeleteDocument(c.Request().Context(), id)
	if err != nil {
		return fmt.Errorf("deleting document %q: %w", id, err)
	}
	if !ok {
		return &apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no document %q", id)}
	}
	return c.NoContent(http.StatusNoContent)
}

// handleListDocuments serves GET /v1/documents.
func (s *server) handleListDocuments(c echo.Context) error {
	docs, err := s.documents()
	if err != nil {
		return err
	}
	list, err := docs.ListDocuments(c.Request().Context())
	if err != nil {
		return fmt.Errorf("listing documents: %w", err)
	}
	if list == nil {
		list = []pipeline.DocumentInfo{}
	}
	chunks := 0
	for _, d := range list {
		chunks += d.Chunks
	}
	return c.JSON(http.StatusOK, map[string]any{"documents": list, "count": len(list), "chunks": chunks})
}

// documentBodyError explains a JSON document body that could not be decoded.
func documentBodyError(err error, limit int64) error {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return badRequest("text", "document_too_large", fmt.Sprintf("the document is larger than %d bytes (--max-document-bytes)", limit))
	case errors.Is(err, io.EOF):
		return badRequest("", "body_invalid", `the body is empty; send {"id": "...", "title": "...", "text": "...", "metadata": {}}`)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badRequest(field, "unknown_field", fmt.Sprintf("unknown field %q; known: id, title, text, kind, metadata", field))
	}
	e := bodyError(err, limit)
	var ae *apiError
	if errors.As(e, &ae) && ae.Code == "question_required" {
		return badRequest("", "body_invalid", err.Error())
	}
	return e
}
