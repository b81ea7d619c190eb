package retrieval

// The lexical index file (<data dir>/index/embedded.lex) holds the BM25
// inverted index of the snapshot's chunks (lexical.Index.WriteFile: ids in
// snapshot order, postings, lengths), stamped with the snapshot's
// generation and checksum and the analyzer's version, so an open loads the
// postings instead of analysing every chunk's text again. It is derived
// data: a compaction writes it from the new snapshot's chunks and renames
// it into place before the snapshot (the commit point). Missing, of another snapshot or analyzer, or damaged, it is
// rebuilt from the text, with the reason in the "opened the index" line;
// a writer then saves the rebuilt one.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"ragtime/lexical"
)

const lexFileName = "embedded.lex"

// lexStamp is what ties a lexical index file to st's snapshot.
func lexStamp(st *state, gen uint64) lexical.FileStamp {
	return lexical.FileStamp{Generation: gen, Source: st.sum}
}

// loadLexical fills the lexical index of st, freshly read from snapshot gen
// (every slot live, nothing replayed yet), from the lexical index file, or
// rebuilds it from the chunks' text when the file does not match; with
// save set it then writes the rebuilt one. It returns how the index was
// made, for the open's log line.
func (ix *Index) loadLexical(st *state, gen uint64, save bool) string {
	path := filepath.Join(ix.dir, lexFileName)
	data, err := os.ReadFile(path)
	if err == nil {
		var x *lexical.Index
		x, err = lexical.ReadFile(data, lexStamp(st, gen))
		if err == nil && (x.Docs() != len(st.chunks) || !x.Identity()) {
			err = fmt.Errorf("%w: it holds %d chunks (%d live), the snapshot %d", lexical.ErrFileStale, x.Docs(), x.Len(), len(st.chunks))
		}
		if err == nil {
			st.useLexical(x)
			return "file"
		}
	}
	reason := err.Error()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		reason = "no lexical index file"
	case errors.Is(err, lexical.ErrFileCorrupt):
		// Derived data: the rebuild gives the same index, but a damaged
		// file means the disk or something else is at fault.
		ix.logger.Warn("the lexical index file is damaged: rebuilding the lexical index from the chunks' text",
			"file", path, "err", err)
	}
	st.indexAll()
	if !save {
		return "rebuilt: " + reason
	}
	if err := ix.saveLexical(st, gen); err != nil {
		ix.logger.Warn("could not save the rebuilt lexical index (the next open rebuilds it again)", "file", path, "err", err)
		return "rebuilt: " + reason
	}
	return "rebuilt and saved: " + reason
}

// saveLexical writes st's lexical index as the file of snapshot gen, st
// being that snapshot as read (nothing replayed): a temporary file,
// renamed into place, the directory fsynced. Only the writer may.
func (ix *Index) saveLexical(st *state, gen uint64) error {
	tmp, err := writeLexicalTemp(ix.dir, st, gen)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(ix.dir, lexFileName)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(ix.dir)
}

// writeLexicalTemp writes st's lexical index, stamped for snapshot gen, as
// a temporary file (fsynced) and returns its path.
func writeLexicalTemp(dir string, st *state, gen uint64) (string, error) {
	return writeTemp(dir, lexFileName, func(f *os.File) error {
		return st.lex.WriteFile(&chunkSyncer{f: f}, lexStamp(st, gen))
	})
}
