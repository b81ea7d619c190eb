package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"ragtime"
	"ragtime/pipeline"
)

// Documents is the document store behind /v1/documents: it chunks, embeds
// and stores (replacing a document of the same id in one step), deletes
// and lists. A nil Documents answers 503.
type Documents interface {
	// PutDocuments stores a batch all or nothing: every document is
	// chunked and embedded before any is stored, and the end of ctx before
	// then stores nothing. Results are in the order of ins.
	PutDocuments(ctx context.Context, ins []pipeline.DocumentInput) ([]pipeline.DocumentResult, error)
	DeleteDocument(ctx context.Context, id string) (bool, error)
	ListDocuments(ctx context.Context) ([]ragtime.DocumentInfo, error)
}

// ErrReadOnly is what a Documents returns when the store cannot be written
// (serve --read-only); it is answered 503.
var ErrReadOnly = errors.New("the document store is read-only")

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
// file's name is its id; a "metadata" field of JSON applies to all). At
// most Deps.MaxConcurrentIngests run at once; a request stores all of its
// documents or none.
func (s *server) handlePutDocuments(c echo.Context) error {
	docs, err := s.documents()
	if err != nil {
		return err
	}
	r := c.Request()
	ct, params, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType))
	limit := s.deps.MaxDocumentBytes
	var inputs []pipeline.DocumentInput
	// The slot bounds what is held in memory: a JSON body takes it before
	// it is read (it is read into memory); a multipart body is spooled to
	// disk first, so a slow upload holds no slot.
	switch ct {
	case echo.MIMEApplicationJSON:
		release, err := s.ingest.acquire(r.Context(), s.deps.IngestWait)
		if err != nil {
			return err
		}
		defer release()
		in, err := readJSONDocument(c, limit)
		if err != nil {
			return err
		}
		inputs = []pipeline.DocumentInput{in}
	case echo.MIMEMultipartForm:
		if params["boundary"] == "" {
			return badRequest("", "bad_multipart", "multipart/form-data without a boundary")
		}
		up, err := s.readMultipart(c, limit)
		if err != nil {
			return err
		}
		defer up.remove()
		release, err := s.ingest.acquire(r.Context(), s.deps.IngestWait)
		if err != nil {
			return err
		}
		defer release()
		inputs = up.inputs
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
	results, err := docs.PutDocuments(r.Context(), inputs)
	if err != nil {
		if r.Context().Err() != nil && !errors.Is(err, ErrReadOnly) {
			return clientClosed() // it left before the commit: nothing was stored
		}
		return fmt.Errorf("storing %d documents: %w", len(inputs), err)
	}
	return c.JSON(http.StatusOK, map[string]any{"documents": results})
}

// readJSONDocument reads a JSON document body {id, title, text, kind,
// metadata} of at most limit bytes of text.
func readJSONDocument(c echo.Context, limit int64) (pipeline.DocumentInput, error) {
	var body struct {
		ID       string            `json:"id"`
		Title    string            `json:"title"`
		Text     *string           `json:"text"`
		Kind     string            `json:"kind"`
		Metadata map[string]string `json:"metadata"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Response(), c.Request().Body, limit+4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return pipeline.DocumentInput{}, documentBodyError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return pipeline.DocumentInput{}, badRequest("", "body_invalid", "the body must hold exactly one JSON object")
	}
	if err := validID(body.ID, "id"); err != nil {
		return pipeline.DocumentInput{}, err
	}
	if body.Text == nil {
		return pipeline.DocumentInput{}, badRequest("text", "text_required", "text is required (the document's content)")
	}
	if int64(len(*body.Text)) > limit {
		return pipeline.DocumentInput{}, badRequest("text", "document_too_large", fmt.Sprintf("text is %d bytes; at most %d are accepted (--max-document-bytes)", len(*body.Text), limit))
	}
	kind := body.Kind
	if kind == "" {
		kind = pipeline.DocumentKind(body.ID)
	}
	if kind == "" {
		kind = pipeline.KindText
	}
	if !pipeline.ValidKind(kind) {
		return pipeline.DocumentInput{}, &apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_kind", Field: "kind",
			Message: fmt.Sprintf("kind %q is not supported: use markdown, html or text", kind)}
	}
	return pipeline.DocumentInput{DocID: body.ID, Title: body.Title, Kind: kind, Body: []byte(*body.Text), Metadata: body.Metadata, Source: "api"}, nil
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
		list = []ragtime.DocumentInfo{}
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
		return badRequest(nameOf(field), "unknown_field", fmt.Sprintf("unknown field %q; known: id, title, text, kind, metadata", field))
	}
	return bodyError(err, limit)
}
