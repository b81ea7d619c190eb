package retrieval

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"ragtime/pipeline"
)

// Ingest defaults.
const (
	DefaultChunkSize    = 1000 // characters
	DefaultChunkOverlap = 100  // characters
	DefaultBatchSize    = 64   // texts per embedding call
	DefaultSaveEvery    = 100  // documents between intermediate saves
)

// Store is what the Ingester writes documents to: the embedded *Index and
// the Qdrant store (retrieval/qdrant) both implement it.
type Store interface {
	// StoredHash returns the content hash recorded for docID, and whether
	// the document is stored at all.
	StoredHash(ctx context.Context, docID string) (string, bool, error)
	// ReplaceDocument stores doc, replacing every chunk previously stored
	// under its DocID; a search sees the old or the new version.
	ReplaceDocument(ctx context.Context, doc Document) error
	// Flush makes what was stored durable (the embedded index fsyncs its
	// log; a server-side store may do nothing). It may run while
	// ReplaceDocument stores later documents: it makes durable at least
	// what was stored before it was called.
	Flush(ctx context.Context) error
}

// Ingester reads files into a Store: it extracts their text, splits it into
// chunks, embeds the chunks and replaces each document's chunks in one step.
type Ingester struct {
	// Embedder embeds chunks; it must be the embedder queries will use.
	Embedder pipeline.Embedder
	// Store receives the documents; an *Index must be writable.
	Store Store
	// ChunkSize is the target chunk length in characters (runes);
	// 0 means DefaultChunkSize.
	ChunkSize int
	// ChunkOverlap is how many characters consecutive chunks share; it is
	// used as given (0 is no overlap) and must be below ChunkSize.
	ChunkOverlap int
	// BatchSize is how many chunk texts go to one Embed call, across file
	// boundaries; 0 means DefaultBatchSize.
	BatchSize int
	// SaveEvery is how many documents are stored between intermediate
	// saves (Store.Flush: for the embedded index an fsync of its log),
	// each made in the background while the next ones are stored, so a
	// power loss costs at most twice that many; 0 means DefaultSaveEvery.
	SaveEvery int
	// Concurrency is how many embedding batches are in flight at once
	// (a remote embedder is mostly waiting on the network; the hash
	// embedder uses the cores); 0 means 1.
	Concurrency int
	// Workers is how many files Ingest reads, extracts and splits at once,
	// ahead of the store; the documents are still stored in the order the
	// files were found, in batches that do not depend on it, so the store
	// ends up the same for any number. 0 means GOMAXPROCS.
	Workers int
}

// Progress is reported after every file and once at the end.
type Progress struct {
	// Path is the file just handled ("" in the final report).
	Path string
	// Files counts the files handled so far, out of TotalFiles.
	Files      int
	TotalFiles int
	// Documents counts the documents stored (new or changed), Skipped the
	// unchanged files and Chunks the chunks stored, so far.
	Documents int
	Skipped   int
	Chunks    int
	// Done is set on the final report.
	Done bool
}

// Stats sums up an ingest run.
type Stats struct {
	// Documents counts the files stored (new or changed).
	Documents int
	// Skipped counts the files left alone because their content hash
	// matched the stored one.
	Skipped int
	// Chunks counts the chunks stored.
	Chunks  int
	Elapsed time.Duration
	// Failed lists the files left out because they could not be read,
	// parsed or chunked, or are not text, in the order they were met.
	Failed []FileError
}

// FileError is a file an ingest left out, and why.
type FileError struct {
	Path string
	Err  error
}

// Error names the file and the reason.
func (e FileError) Error() string { return e.Err.Error() }

// Unwrap returns the reason.
func (e FileError) Unwrap() error { return e.Err }

// source is one file to ingest.
type source struct {
	path  string
	docID string
	kind  string
}

// Ingest ingests the files and folders in paths. Folders are walked
// recursively for .md, .markdown, .txt, .html and .htm files; other files
// and hidden files and folders are skipped. A document's id is its path
// relative to the argument it was found under, slash-separated (a file
// given directly is known by its base name).
//
// A file whose SHA-256 matches the stored one is skipped; a changed file's
// chunks replace the old ones. A file that cannot be read, parsed or
// chunked, or is not text, is left out and listed in Stats.Failed (the
// error names the file) while the run goes on with the next; only a
// failure of the embedder or the store, or the end of ctx, stops the run,
// and then the error says so. The index is saved every SaveEvery documents
// and at the end, also when the run stops. progress may be nil.
func (in *Ingester) Ingest(ctx context.Context, paths []string, progress func(Progress)) (Stats, error) {
	start := time.Now()
	if err := in.validate(); err != nil {
		return Stats{}, err
	}
	sources, err := collect(paths)
	if err != nil {
		return Stats{}, err
	}
	run := &ingestRun{
		in:       in,
		ctx:      ctx,
		splitter: in.splitter(),
		progress: Progress{TotalFiles: len(sources)},
		report:   progress,
	}
	err = run.all(sources)
	if serr := run.waitSave(); serr != nil {
		err = errors.Join(err, serr)
	}
	if serr := in.Store.Flush(ctx); serr != nil {
		err = errors.Join(err, fmt.Errorf("saving after ingest: %w", serr))
	}
	run.progress.Path, run.progress.Done = "", true
	run.emit()
	p := run.progress
	return Stats{Documents: p.Documents, Skipped: p.Skipped, Chunks: p.Chunks, Elapsed: time.Since(start), Failed: run.failed}, err
}

func (in *Ingester) validate() error {
	switch {
	case in.Embedder == nil:
		return errors.New("ingesting: no embedder")
	case in.Store == nil:
		return errors.New("ingesting: no store")
	case in.Workers < 0:
		return fmt.Errorf("ingesting: workers %d: --workers must be positive", in.Workers)
	case in.Concurrency < 0:
		return fmt.Errorf("ingesting: concurrency %d: --concurrency must be positive", in.Concurrency)
	case isReadOnly(in.Store):
		return fmt.Errorf("ingesting: %w", ErrReadOnly)
	case in.ChunkSize < 0:
		return fmt.Errorf("ingesting: chunk size %d: --chunk-size must be positive", in.ChunkSize)
	case in.BatchSize < 0:
		return fmt.Errorf("ingesting: batch size %d: --batch-size must be positive", in.BatchSize)
	}
	size := cmpOr(in.ChunkSize, DefaultChunkSize)
	if in.ChunkOverlap < 0 || in.ChunkOverlap >= size {
		return fmt.Errorf("ingesting: chunk overlap %d: --chunk-overlap must be at least 0 and below the chunk size (%d)", in.ChunkOverlap, size)
	}
	return nil
}

func cmpOr(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// splitter returns the chunker. One recursive character splitter serves
// every kind of file: it keeps the text verbatim, honours ChunkOverlap,
// and HTML and plain text, once extracted, are the same kind of input.
// Markdown headings are still preferred split points: they come first
// among the separators, and separators are kept so a chunk starts with its
// "## heading".
func (in *Ingester) splitter() chunker {
	return chunker{size: cmpOr(in.ChunkSize, DefaultChunkSize), overlap: in.ChunkOverlap}
}

// collect lists the files to ingest, refusing two files that would get the
// same doc id (one would silently overwrite the other).
func collect(paths []string) ([]source, error) {
	var out []source
	seen := make(map[string]string)
	add := func(path, docID string) error {
		kind := pipeline.DocumentKind(path)
		if kind == "" {
			return nil
		}
		if prev, dup := seen[docID]; dup {
			return fmt.Errorf("ingesting: %s and %s would both be document %q: ingest them in separate runs or from a common parent folder", prev, path, docID)
		}
		seen[docID] = path
		out = append(out, source{path: path, docID: docID, kind: kind})
		return nil
	}
	for _, root := range paths {
		fi, err := os.Stat(root)
		if err != nil {
			return nil, fmt.Errorf("ingesting %s: %w", root, err)
		}
		if !fi.IsDir() {
			if pipeline.DocumentKind(root) == "" {
				return nil, fmt.Errorf("ingesting %s: unsupported file type (want .md, .markdown, .txt, .html or .htm)", root)
			}
			if err := add(root, filepath.Base(root)); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("walking %s: %w", path, err)
			}
			if path != root && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 {
				// Follow links to files; never to folders, which could loop.
				fi, err := os.Stat(path)
				if err != nil || !fi.Mode().IsRegular() {
					return nil
				}
			} else if !d.Type().IsRegular() {
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return fmt.Errorf("naming %s: %w", path, err)
			}
			return add(path, filepath.ToSlash(rel))
		})
		if err != nil {
			return nil, fmt.Errorf("ingesting: %w", err)
		}
	}
	return out, nil
}

// ingestRun is the state of one Ingest call. Chunks of several documents
// queue up so each Embed call gets a full batch; a document is stored once
// all its chunks have vectors.
type ingestRun struct {
	in        *Ingester
	ctx       context.Context
	splitter  chunker
	progress  Progress
	report    func(Progress)
	pending   []*pendingDoc // documents waiting for vectors, in order
	queue     []queued      // chunk texts waiting to be embedded
	sinceSave int
	// saving carries the result of the save running in the background
	// (saveBehind), nil when none runs.
	saving chan error
	// hold keeps embedded documents out of the store: the caller stores
	// them itself (IngestContents, all or nothing).
	hold bool
	// failed lists the files left out (Ingest goes on past them).
	failed []FileError
}

type pendingDoc struct {
	doc     Document
	missing int
}

type queued struct {
	doc  *pendingDoc
	i    int
	text string
}

func (r *ingestRun) emit() {
	if r.report != nil {
		r.report(r.progress)
	}
}

func (r *ingestRun) all(sources []source) error {
	batch := cmpOr(r.in.BatchSize, DefaultBatchSize)
	wave := batch * cmpOr(r.in.Concurrency, 1)
	ready, done, stop := r.prepareAll(r.ctx, sources)
	defer stop() // the workers are gone before the caller may close the store
	for i, s := range sources {
		if err := r.ctx.Err(); err != nil {
			return fmt.Errorf("ingesting: %w", err)
		}
		var pr prepared
		select {
		case pr = <-ready[i]:
			done()
		case <-r.ctx.Done():
			return fmt.Errorf("ingesting: %w", r.ctx.Err())
		}
		if err := pr.err; err != nil {
			var se storeError
			if errors.As(err, &se) {
				return err
			}
			r.failed = append(r.failed, FileError{Path: s.path, Err: err})
		} else {
			r.enqueue(pr)
		}
		for len(r.queue) >= wave {
			if err := r.embed(batch, wave); err != nil {
				return err
			}
		}
		r.progress.Files++
		r.progress.Path = s.path
		r.emit()
	}
	for len(r.queue) > 0 {
		if err := r.embed(batch, wave); err != nil {
			return err
		}
	}
	return r.embed(batch, 0) // stores documents without chunks still pending
}

// prepared is a file read, extracted and split by a worker, waiting for
// its turn: doc is nil when the file is unchanged (or failed, with err).
type prepared struct {
	doc   *pendingDoc
	texts []string // what is embedded for each chunk, in order
	err   error
}

// preparedAhead is how many files per worker may wait, prepared, for the
// store: enough to keep the workers busy while the store embeds and stores
// a wave (128 chunks, some 16 pages of the PostgreSQL manual: with 4 a
// worker, two workers stalled halfway through each wave, and two cores
// ingested the manual only 1.23× faster than one, against 1.5× with 16),
// few enough to hold little memory (the files' text).
const preparedAhead = 16

// prepareAll starts Workers goroutines that read, extract and split the
// sources (the work that is independent per file) and returns one channel
// per source, on which its result arrives; done must be called once per
// result taken, which lets the next file start, and stop once at the end:
// it stops the workers and waits for them (each finishes the file in hand).
func (r *ingestRun) prepareAll(parent context.Context, sources []source) (ready []chan prepared, done, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	var wg sync.WaitGroup
	workers := max(1, min(cmpOr(r.in.Workers, runtime.GOMAXPROCS(0)), len(sources)))
	ready = make([]chan prepared, len(sources))
	for i := range ready {
		ready[i] = make(chan prepared, 1)
	}
	slots := make(chan struct{}, workers*preparedAhead)
	jobs := make(chan int)
	wg.Go(func() {
		defer close(jobs)
		for i := range sources {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	})
	for range workers {
		wg.Go(func() {
			splitter := r.in.splitter()
			for i := range jobs {
				ready[i] <- r.prepareFile(ctx, splitter, sources[i])
			}
		})
	}
	return ready, func() { <-slots }, func() {
		cancel()
		wg.Wait()
	}
}

// prepareFile reads, extracts and chunks one file. Its errors are the
// file's own (unreadable, not text, refused by the parser), after which
// the run can go on with the next, except a storeError, which stops the
// run.
func (r *ingestRun) prepareFile(ctx context.Context, splitter chunker, s source) prepared {
	content, err := os.ReadFile(s.path)
	if err != nil {
		return prepared{err: fmt.Errorf("reading %s: %w", s.path, err)}
	}
	return r.in.prepare(ctx, splitter, s, content, "", nil)
}

// content extracts and chunks one document and queues its chunks, unless
// its hash matches the stored one (then it returns nil). title, when not
// empty, replaces the extracted title; meta is added to every chunk's
// metadata.
func (r *ingestRun) content(s source, content []byte, title string, meta map[string]string) (*pendingDoc, error) {
	pr := r.in.prepare(r.ctx, r.splitter, s, content, title, meta)
	if pr.err != nil {
		return nil, pr.err
	}
	r.enqueue(pr)
	return pr.doc, nil
}

// enqueue queues a prepared document's chunks for the embedder, or counts
// it as skipped when it is unchanged.
func (r *ingestRun) enqueue(pr prepared) {
	p := pr.doc
	if p == nil {
		r.progress.Skipped++
		return
	}
	for i, t := range pr.texts {
		r.queue = append(r.queue, queued{doc: p, i: i, text: t})
	}
	r.pending = append(r.pending, p)
}

// prepare extracts and chunks one document, unless its hash matches the
// stored one (then doc is nil). title, when not empty, replaces the
// extracted title; meta is added to every chunk's metadata. It is safe to
// call from several goroutines (each with its own splitter).
func (in *Ingester) prepare(ctx context.Context, splitter chunker, s source, content []byte, title string, meta map[string]string) prepared {
	sum := sha256.Sum256(content)
	hash := hex.EncodeToString(sum[:])
	if len(meta) > 0 { // the same text with other metadata is another version
		for _, k := range slices.Sorted(maps.Keys(meta)) {
			sum = sha256.Sum256([]byte(hash + "\x00" + k + "\x00" + meta[k]))
			hash = hex.EncodeToString(sum[:])
		}
	}
	old, ok, err := in.Store.StoredHash(ctx, s.docID)
	if err != nil {
		return prepared{err: storeError{fmt.Errorf("checking %s: %w", s.docID, err)}}
	}
	if ok && old == hash {
		return prepared{}
	}
	// The title falls back to the base of the id, not of the path: for a
	// file they agree, and content sent through the API has Source "api"
	// as its path.
	ex, err := extract(s.kind, s.docID, content)
	if err != nil {
		return prepared{err: fmt.Errorf("reading %s: %w", s.path, err)}
	}
	if title != "" {
		ex.title = title
	}
	var texts []string
	if ex.text != "" {
		texts = splitter.split(ex.text)
	}
	p := &pendingDoc{doc: Document{DocID: s.docID, Title: ex.title, ContentHash: hash, Source: s.path}}
	chunkMeta := maps.Clone(meta)
	if chunkMeta == nil {
		chunkMeta = map[string]string{}
	}
	chunkMeta["type"] = s.kind
	embed := make([]string, 0, len(texts))
	for _, t := range texts {
		// Kept separators start the piece after them; a sentence's ". "
		// belongs to the sentence before, so it is not left to open a chunk.
		t = strings.TrimPrefix(t, ". ")
		if strings.TrimSpace(t) == "" {
			continue
		}
		p.doc.Chunks = append(p.doc.Chunks, pipeline.Chunk{Text: t, Metadata: chunkMeta})
		// The title goes into what is embedded (not into the stored text):
		// a chunk deep in a document still matches questions naming it.
		embed = append(embed, ex.title+"\n\n"+t)
	}
	p.doc.Vectors = make([][]float32, len(p.doc.Chunks))
	p.missing = len(p.doc.Chunks)
	return prepared{doc: p, texts: embed}
}

// storeError is a failure of the store rather than of a document: it stops
// an Ingest instead of leaving the document out.
type storeError struct{ error }

func (e storeError) Unwrap() error { return e.error }

// IngestContent stores one document: it extracts, chunks and embeds all of
// it before replacing the stored version in one step, so a failure on the
// way leaves the old version searchable. Unchanged content is left alone.
// The store is flushed before it returns.
func (in *Ingester) IngestContent(ctx context.Context, c pipeline.DocumentInput) (pipeline.DocumentResult, error) {
	res, err := in.IngestContents(ctx, []pipeline.DocumentInput{c})
	if err != nil {
		return pipeline.DocumentResult{}, err
	}
	return res[0], nil
}

// IngestContents stores a batch of documents all or nothing. Every document
// is read, extracted, chunked and embedded first, with nothing stored; a
// failure or the end of ctx in that phase leaves the store as it was. Only
// then are the documents stored, in order, and the store flushed once; that
// phase no longer listens to ctx (a caller that leaves then would otherwise
// cut the batch in two), so only the store's own failure can stop it part
// way, and the error then names the document it stopped at. Unchanged
// documents are left alone; an id given twice is refused.
func (in *Ingester) IngestContents(ctx context.Context, cs []pipeline.DocumentInput) ([]pipeline.DocumentResult, error) {
	if err := in.validate(); err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(cs))
	for _, c := range cs {
		switch {
		case c.DocID == "":
			return nil, errors.New("ingesting: empty document id")
		case !pipeline.ValidKind(c.Kind):
			return nil, fmt.Errorf("ingesting %s: unsupported kind %q", c.DocID, c.Kind)
		case seen[c.DocID]:
			return nil, fmt.Errorf("ingesting: document %q is given twice in one batch", c.DocID)
		}
		seen[c.DocID] = true
	}
	run := &ingestRun{in: in, ctx: ctx, splitter: in.splitter(), hold: true}
	batch := cmpOr(in.BatchSize, DefaultBatchSize)
	wave := batch * cmpOr(in.Concurrency, 1)
	staged := make([]*pendingDoc, len(cs))
	for i, c := range cs {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("ingesting %s: %w", c.DocID, err)
		}
		body := c.Body
		if body == nil && c.File != "" {
			var err error
			if body, err = os.ReadFile(c.File); err != nil {
				return nil, fmt.Errorf("ingesting %s: reading its upload: %w", c.DocID, err)
			}
		}
		p, err := run.content(source{path: cmp.Or(c.Source, c.DocID), docID: c.DocID, kind: c.Kind}, body, c.Title, c.Metadata)
		if err != nil {
			return nil, err
		}
		staged[i] = p
		for len(run.queue) >= wave {
			if err := run.embed(batch, wave); err != nil {
				return nil, err
			}
		}
	}
	for len(run.queue) > 0 {
		if err := run.embed(batch, wave); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ingesting: %w", err)
	}
	// Commit: every document is ready. They are stored as one batch, as
	// an ingest's wave is (a store that takes batches plans all their
	// chunks' graph neighbours across the cores); a failure names the
	// document it stopped at and how many were stored before it.
	commit := context.WithoutCancel(ctx)
	run.ctx = commit
	results := make([]pipeline.DocumentResult, len(cs))
	var docs []Document
	for i, p := range staged {
		if p == nil {
			results[i] = pipeline.DocumentResult{DocID: cs[i].DocID, Unchanged: true}
			continue
		}
		docs = append(docs, p.doc)
		results[i] = pipeline.DocumentResult{DocID: p.doc.DocID, Title: p.doc.Title, Chunks: len(p.doc.Chunks)}
	}
	if len(docs) > 0 {
		if err := run.store(docs); err != nil {
			return nil, err
		}
	}
	if err := in.Store.Flush(commit); err != nil {
		return nil, fmt.Errorf("saving after storing %d documents: %w", len(cs), err)
	}
	return results, nil
}

// embed embeds up to n queued chunks, in batches of batch chunks of which
// up to Concurrency are in flight at once, and stores the documents that are
// complete, in the order their files were read.
func (r *ingestRun) embed(batch, n int) error {
	n = min(n, len(r.queue))
	if n > 0 {
		work := r.queue[:n]
		vecs := make([][]float32, n)
		g, ctx := errgroup.WithContext(r.ctx)
		for lo := 0; lo < n; lo += batch {
			hi := min(lo+batch, n)
			g.Go(func() error {
				part := work[lo:hi]
				texts := make([]string, len(part))
				for i, q := range part {
					texts[i] = q.text
				}
				got, err := r.in.Embedder.Embed(ctx, texts)
				if err != nil {
					return fmt.Errorf("embedding chunks of %s: %w", part[0].doc.doc.DocID, err)
				}
				if len(got) != len(part) {
					return fmt.Errorf("embedding chunks of %s: embedder returned %d vectors for %d texts", part[0].doc.doc.DocID, len(got), len(part))
				}
				copy(vecs[lo:hi], got)
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		for i, q := range work {
			q.doc.doc.Vectors[q.i] = vecs[i]
			q.doc.missing--
		}
		r.queue = r.queue[n:]
	}
	if r.hold {
		return nil
	}
	// The documents complete now are stored as one batch (cut where a save
	// falls due), so a store that takes batches spreads their graph work
	// across the cores; what a batch holds depends only on the files and
	// the batch size, so the store ends up the same for any Workers.
	saveEvery := cmpOr(r.in.SaveEvery, DefaultSaveEvery)
	for len(r.pending) > 0 && r.pending[0].missing == 0 {
		var docs []Document
		for len(r.pending) > 0 && r.pending[0].missing == 0 && r.sinceSave+len(docs) < saveEvery {
			docs = append(docs, r.pending[0].doc)
			r.pending = r.pending[1:]
		}
		if err := r.store(docs); err != nil {
			return err
		}
		for _, d := range docs {
			r.progress.Documents++
			r.progress.Chunks += len(d.Chunks)
		}
		r.sinceSave += len(docs)
		if r.sinceSave >= saveEvery {
			if err := r.saveBehind(); err != nil {
				return err
			}
			r.sinceSave = 0
		}
	}
	return nil
}

// saveBehind starts a save (Store.Flush) of what is stored so far in the
// background, once the one before it has finished, whose error it
// returns: the next documents are stored while the log is fsynced, and a
// power loss still costs at most two saves' worth of documents.
func (r *ingestRun) saveBehind() error {
	if err := r.waitSave(); err != nil {
		return err
	}
	r.saving = make(chan error, 1)
	go func(done chan<- error, ctx context.Context) { done <- r.in.Store.Flush(ctx) }(r.saving, r.ctx)
	return nil
}

// waitSave waits for the save saveBehind started, if any, and returns its
// error.
func (r *ingestRun) waitSave() error {
	if r.saving == nil {
		return nil
	}
	err := <-r.saving
	r.saving = nil
	if err != nil {
		return fmt.Errorf("saving the store during ingest: %w", err)
	}
	return nil
}

// batchStore is a Store that stores several documents in one call, in
// order (the embedded *Index: Index.ReplaceDocuments).
type batchStore interface {
	ReplaceDocuments(ctx context.Context, docs []Document) error
}

// store stores docs in order, in one call when the store takes batches.
func (r *ingestRun) store(docs []Document) error {
	if bs, ok := r.in.Store.(batchStore); ok {
		if err := bs.ReplaceDocuments(r.ctx, docs); err != nil {
			return fmt.Errorf("storing a batch of %d documents from %s: %w", len(docs), docs[0].DocID, err)
		}
		return nil
	}
	for _, d := range docs {
		if err := r.in.Store.ReplaceDocument(r.ctx, d); err != nil {
			return fmt.Errorf("storing %s: %w", d.DocID, err)
		}
	}
	return nil
}

// isReadOnly reports whether s is an embedded index opened read-only.
func isReadOnly(s Store) bool {
	ix, ok := s.(*Index)
	return ok && !ix.writable
}
