package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"ragtime/pipeline"
)

// Ingest limits (the defaults of Deps).
const (
	// DefaultMaxConcurrentIngests bounds the POST /v1/documents requests
	// processed at once: each holds its documents' chunks and vectors until
	// it commits, and embedding them uses the cores.
	DefaultMaxConcurrentIngests = 2
	// DefaultIngestWait is how long a POST /v1/documents waits for a slot
	// before it is answered 503 ingest_busy.
	DefaultIngestWait = 10 * time.Second
	// multipartFilesPerRequest bounds a multipart body to this many
	// --max-document-bytes.
	multipartFilesPerRequest = 8
	// maxMetadataBytes bounds the multipart metadata field.
	maxMetadataBytes = 64 << 10
)

// statusClientClosed is logged for a request whose client left before the
// answer (nginx's 499); nobody reads the body.
const statusClientClosed = 499

// ingestSlots bounds concurrent ingests: a buffered channel holding one
// token per running ingest.
type ingestSlots chan struct{}

// acquire takes a slot, waiting up to wait; it answers 503 ingest_busy (with
// Retry-After) when none frees in time, and 499 when the client leaves.
func (s ingestSlots) acquire(ctx context.Context, wait time.Duration) (release func(), err error) {
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	default:
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s <- struct{}{}:
		return func() { <-s }, nil
	case <-t.C:
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "ingest_busy", retryAfter: 1,
			Message: fmt.Sprintf("%d document uploads are already being processed (--max-concurrent-ingests) and none finished within %s; retry shortly", cap(s), wait)}
	case <-ctx.Done():
		return nil, clientClosed()
	}
}

// clientClosed answers a request whose client left: nothing was stored.
func clientClosed() *apiError {
	return &apiError{Status: statusClientClosed, Code: "client_closed", Message: "the client closed the request before it was answered; nothing was stored"}
}

// upload is a multipart body spooled to disk: its files in a private
// temporary folder (removed by remove) and the metadata applied to all.
type upload struct {
	dir    string
	inputs []pipeline.DocumentInput
}

func (u *upload) remove() {
	if u.dir != "" {
		_ = os.RemoveAll(u.dir)
	}
}

// readMultipart reads a multipart body to its end, writing each file part
// to a temporary file as it arrives, so a request holds at most one part's
// buffer in memory while its body arrives. It refuses an unsupported
// extension (415), a file over limit (400), a file name given twice (400)
// or a body over multipartFilesPerRequest × limit (413) before anything is
// processed. A body that ends early (the client gave up) is a 400, or a 499
// when the request's context says the client is gone. The caller removes
// the upload.
func (s *server) readMultipart(c echo.Context, limit int64) (*upload, error) {
	r := c.Request()
	total := multipartFilesPerRequest * limit
	r.Body = http.MaxBytesReader(c.Response(), r.Body, total)
	readErr := func(what string, err error) error {
		var mb *http.MaxBytesError
		var disk *fs.PathError
		switch {
		case errors.As(err, &disk): // the server's disk, not the body
			return fmt.Errorf("spooling %s: %w", what, err)
		case errors.As(err, &mb):
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: fmt.Sprintf("the multipart body is larger than %d bytes (%d × --max-document-bytes); send fewer files per request", total, multipartFilesPerRequest)}
		case r.Context().Err() != nil:
			return clientClosed()
		}
		return badRequest("", "bad_multipart", fmt.Sprintf("reading %s: %v; nothing was stored", what, err))
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, badRequest("", "bad_multipart", "reading the multipart body: "+err.Error())
	}
	dir, err := os.MkdirTemp(s.deps.UploadDir, "ragtime-upload-")
	if err != nil {
		return nil, fmt.Errorf("making a folder for the upload: %w", err)
	}
	u := &upload{dir: dir}
	fail := func(err error) (*upload, error) {
		u.remove()
		return nil, err
	}
	var meta map[string]string
	seen := map[string]bool{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(readErr("the multipart body", err))
		}
		name := part.FileName()
		if name == "" {
			if part.FormName() == "metadata" {
				b, err := io.ReadAll(io.LimitReader(part, maxMetadataBytes+1))
				if err != nil {
					return fail(readErr("the metadata field", err))
				}
				if len(b) > maxMetadataBytes {
					return fail(badRequest("metadata", "metadata_invalid", fmt.Sprintf("the metadata field is larger than %d bytes", maxMetadataBytes)))
				}
				if err := json.Unmarshal(b, &meta); err != nil {
					return fail(badRequest("metadata", "metadata_invalid", "the metadata field must be a JSON object of strings"))
				}
			}
			continue
		}
		name = path.Base(strings.ReplaceAll(name, "\\", "/"))
		if err := validID(name, "file name"); err != nil {
			return fail(err)
		}
		kind := pipeline.DocumentKind(name)
		if kind == "" {
			return fail(&apiError{Status: http.StatusUnsupportedMediaType, Code: "unsupported_file_type", Field: name,
				Message: fmt.Sprintf("%s: unsupported file type; send .md, .markdown, .txt, .html or .htm files", name)})
		}
		if seen[name] {
			return fail(badRequest(name, "duplicate_file", fmt.Sprintf("%s is sent twice; each file name (its document id) may appear once per request", name)))
		}
		seen[name] = true
		file := filepath.Join(dir, strconv.Itoa(len(u.inputs)))
		n, err := spool(file, part, limit+1)
		if err != nil {
			return fail(readErr(name, err))
		}
		if n > limit {
			return fail(badRequest(name, "document_too_large", fmt.Sprintf("%s is larger than %d bytes (--max-document-bytes)", name, limit)))
		}
		u.inputs = append(u.inputs, pipeline.DocumentInput{DocID: name, Kind: kind, File: file, Source: "api"})
	}
	if len(u.inputs) == 0 {
		return fail(badRequest("", "no_files", "the multipart body holds no file"))
	}
	for i := range u.inputs {
		u.inputs[i].Metadata = meta
	}
	return u, nil
}

// spool copies up to max bytes of r into a new file; a failure of the file
// is an *fs.PathError, anything else came from r.
func spool(name string, r io.Reader, max int64) (int64, error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, max))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return n, err
}
