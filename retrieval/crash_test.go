package retrieval

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"ragtime/pipeline"
)

// The crash test's writer runs as a child process (this test binary run
// again with crashEnvDir set) so it can be killed with SIGKILL at any
// instruction: in an append, an fsync, a compaction's renames, the open and
// replay after the previous kill.
const (
	crashEnvDir  = "RAGTIME_CRASH_DIR"
	crashEnvSeq  = "RAGTIME_CRASH_SEQ"
	crashDim     = 16
	crashDocs    = 30
	crashCompact = 4 << 10 // bytes of log: a background compaction every dozen writes
)

// crashDoc is document id at version ver: its chunk count, texts and
// vectors all follow from the two, so the parent can check every byte.
func crashDoc(id string, ver int) Document {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", id, ver)
	r := rand.New(rand.NewPCG(h.Sum64(), 7))
	n := 1 + r.IntN(6)
	doc := Document{DocID: id, Title: "T " + id, ContentHash: "v" + strconv.Itoa(ver)}
	key := strings.ReplaceAll(id, "-", "")
	for i := range n {
		doc.Chunks = append(doc.Chunks, pipeline.Chunk{
			// The words id<doc> and part<doc>v<ver>c<i> let the lexical
			// leg be checked as exactly as the vectors.
			Text:     fmt.Sprintf("%s version %d chunk %d of %d id%s part%sv%dc%d", id, ver, i, n, key, key, ver, i),
			Metadata: map[string]string{"ver": strconv.Itoa(ver)},
		})
		doc.Vectors = append(doc.Vectors, randomVector(r, crashDim))
	}
	return doc
}

// TestCrashWriterChild is the writer half of TestCrashSafety; run on its
// own it skips. It writes until killed (documents one at a time and in
// batches of four), printing "B op doc ver" ("B puts doc ver doc ver ...")
// before each write and "A" once the write is saved (acknowledged).
func TestCrashWriterChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" {
		t.Skip("the writer TestCrashSafety runs as a child process")
	}
	seq, _ := strconv.Atoi(os.Getenv(crashEnvSeq))
	ix, err := OpenIndex(dir, IndexOptions{Dimension: crashDim, Embedder: "test", Writable: true, CompactAfter: crashCompact})
	if err != nil {
		fmt.Printf("E %v\n", err)
		os.Exit(3)
	}
	r := rand.New(rand.NewPCG(uint64(seq), uint64(os.Getpid())))
	ctx := context.Background()
	for ; ; seq++ {
		id := fmt.Sprintf("doc-%02d", r.IntN(crashDocs))
		switch p := r.IntN(100); {
		case p < 3:
			fmt.Printf("B compact - 0\n")
			_, err = ix.Compact(ctx)
		case p < 20:
			fmt.Printf("B delete %s 0\n", id)
			_, err = ix.DeleteDocument(ctx, id)
		case p < 35:
			// A batch, as an ingest stores one: each of its documents is
			// found at its new version or its old one.
			ids := []string{id}
			for len(ids) < 4 {
				if more := fmt.Sprintf("doc-%02d", r.IntN(crashDocs)); !slices.Contains(ids, more) {
					ids = append(ids, more)
				}
			}
			docs := make([]Document, len(ids))
			line := "B puts"
			for i, d := range ids {
				docs[i] = crashDoc(d, seq)
				line += fmt.Sprintf(" %s %d", d, seq)
			}
			fmt.Println(line)
			err = ix.ReplaceDocuments(ctx, docs)
		default:
			fmt.Printf("B put %s %d\n", id, seq)
			err = ix.ReplaceDocument(ctx, crashDoc(id, seq))
		}
		if err == nil {
			err = ix.Save()
		}
		if err != nil {
			fmt.Printf("E %v\n", err)
			os.Exit(3)
		}
		fmt.Printf("A\n")
	}
}

// TestCrashSafety kills the writer child with SIGKILL at random moments,
// 60 times, and after each kill opens the index as the next writer would
// and checks: it opens without a manual step, no temporary file is left
// once it is open, every acknowledged write is there (the one in flight
// may or may not be), every stored document is whole (its chunks those of
// one version, none twice) and findable through the HNSW graph and Search,
// and through the lexical leg (SearchText) at its version, which finds
// nothing else: no chunk of another version, of a deleted document, twice.
func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashEnvDir) != "" {
		t.Skip("in the child")
	}
	// Not parallel: a fork briefly shares every open file description with
	// the child until it execs, a flock'ed lock file's included, so another
	// test's writer could find its fresh lock "held" by a forking child.
	dataDir := t.TempDir()
	// want is each document's acknowledged version (0: absent).
	want := map[string]int{}
	r := rand.New(rand.NewPCG(11, 12))
	seq := 1
	const kills = 60
	acked, compactions := 0, 0
	seen := map[string]int{} // what the opens after a kill found, by kind
	for round := range kills {
		cmd, linec := startCrashChild(t, "^TestCrashWriterChild$", crashEnvDir+"="+dataDir, crashEnvSeq+"="+strconv.Itoa(seq))
		// Kill at a point chosen by what the child has done, not by the
		// clock, so a loaded machine does not move every kill into
		// start-up: one round in eight during start-up (open, replay, the
		// compaction a rebuilt graph starts), the others after a random
		// number of acknowledged writes, a random moment into the next.
		var lines []string
		killAfter := -1 // acknowledgements; -1: during start-up
		if r.IntN(8) != 0 {
			killAfter = r.IntN(25)
		}
		deadline := time.After(5 * time.Second) // a stuck child is killed (and fails below)
		if killAfter < 0 {
			deadline = time.After(time.Duration(r.IntN(40)) * time.Millisecond)
		}
		acks := 0
	collect:
		for {
			select {
			case l, ok := <-linec:
				if !ok {
					break collect
				}
				lines = append(lines, l)
				if l == "A" {
					acks++
				}
				if killAfter >= 0 && acks >= killAfter && strings.HasPrefix(l, "B ") {
					time.Sleep(time.Duration(r.IntN(8000)) * time.Microsecond)
					break collect
				}
			case <-deadline:
				break collect
			}
		}
		lines = killCrashChild(cmd, linec, lines)

		// Replay the child's report: acknowledged writes move want; the
		// last begun and unacknowledged one may or may not have landed.
		var inflight []string
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, "E "):
				t.Fatalf("round %d: the writer failed: %s", round, l)
			case strings.HasPrefix(l, "B "):
				inflight = strings.Fields(l)[1:]
			case l == "A":
				applyCrashOp(want, inflight)
				if inflight[0] == "compact" {
					compactions++
				}
				acked++
				inflight = nil
			}
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "B put") {
				v, _ := strconv.Atoi(strings.Fields(l)[3])
				seq = max(seq, v+1)
			}
		}
		seq += 1000 // versions of a killed round never repeat

		var inflights [][]string
		if inflight != nil {
			inflights = append(inflights, inflight)
		}
		reopenAndCheck(t, round, dataDir, want, inflights, seen)
	}
	if acked < kills*5 {
		t.Errorf("only %d writes acknowledged over %d runs: the kills came too early to test much", acked, kills)
	}
	t.Logf("%d kills, %d acknowledged writes (%d explicit compactions); opens after a kill found: %v", kills, acked, compactions, seen)
}

// startCrashChild runs this test binary again as a crash test's child,
// running the test that matches run with env added to the environment, and
// returns it with its stdout's lines, the channel closed at their end.
func startCrashChild(t *testing.T, run string, env ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	linec := make(chan string)
	go func() {
		defer close(linec)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			linec <- sc.Text()
		}
	}()
	return cmd, linec
}

// killCrashChild kills the child with SIGKILL and returns lines with the
// rest of its output appended, once it has exited.
func killCrashChild(cmd *exec.Cmd, linec <-chan string, lines []string) []string {
	cmd.Process.Signal(syscall.SIGKILL)
	for l := range linec {
		lines = append(lines, l)
	}
	cmd.Wait()
	return lines
}

// crashRepairs are what an open after a kill may say it repaired, counted
// by the crash tests.
var crashRepairs = []string{"dropped an interrupted record", "replacing an index log", "rebuilding the index's HNSW graph",
	"appended the log segment of a compaction a crash interrupted", "finished a compaction a crash interrupted",
	"rebuilt and saved: lexical index file is stale"}

// reopenAndCheck opens the index a killed writer left, as the next writer
// would, and checks it against want, the acknowledged versions, with any
// of the in-flight operations applied or not (each writer's in flight is
// on documents no other writer touches); then sets want to what is there.
func reopenAndCheck(t *testing.T, round int, dataDir string, want map[string]int, inflights [][]string, seen map[string]int) {
	t.Helper()
	before, _ := filepath.Glob(filepath.Join(dataDir, indexDirName, "*.tmp"))
	if len(before) > 0 {
		seen["temporary files"]++
	}
	var logged strings.Builder
	ix, err := OpenIndex(dataDir, IndexOptions{Dimension: crashDim, Embedder: "test", Writable: true, CompactAfter: -1,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	for _, what := range crashRepairs {
		if strings.Contains(logged.String(), what) {
			seen[what]++
		}
	}
	if err != nil {
		t.Fatalf("round %d: the index does not open after a kill: %v", round, err)
	}
	// The lexical index file is renamed into place before the snapshot: a
	// kill never leaves a snapshot without one, nor a damaged one.
	for _, never := range []string{"no lexical index file", "lexical index file is damaged"} {
		if strings.Contains(logged.String(), never) {
			t.Errorf("round %d: the open after a kill says %q: %s", round, never, logged.String())
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(dataDir, indexDirName, "*.tmp"))
	if len(tmps) > 0 {
		t.Errorf("round %d: temporary files left after open: %v", round, tmps)
	}
	alt := map[string]int{}
	for k, v := range want {
		alt[k] = v
	}
	for _, op := range inflights {
		applyCrashOp(alt, op)
	}
	checkCrashIndex(t, round, ix, want, alt)
	// What is there now is the truth the next round builds on.
	for _, d := range ix.Documents() {
		v, _ := strconv.Atoi(strings.TrimPrefix(d.ContentHash, "v"))
		want[d.DocID] = v
	}
	for id := range want {
		if _, ok := ix.DocumentHash(id); !ok {
			want[id] = 0
		}
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dataDir, indexDirName, "*.tmp")); len(tmps) > 0 {
		t.Errorf("round %d: temporary files left after close: %v", round, tmps)
	}
}

func applyCrashOp(m map[string]int, op []string) {
	switch op[0] {
	case "put":
		v, _ := strconv.Atoi(op[2])
		m[op[1]] = v
	case "delete":
		m[op[1]] = 0
	case "puts":
		for i := 1; i+1 < len(op); i += 2 {
			v, _ := strconv.Atoi(op[i+1])
			m[op[i]] = v
		}
	}
}

// checkCrashIndex checks that every document of ix is at the version want
// or alt gives it, whole, and findable.
func checkCrashIndex(t *testing.T, round int, ix *Index, want, alt map[string]int) {
	t.Helper()
	ctx := context.Background()
	total := 0
	for id := range crashDocs {
		id := fmt.Sprintf("doc-%02d", id)
		got := 0
		if h, ok := ix.DocumentHash(id); ok {
			got, _ = strconv.Atoi(strings.TrimPrefix(h, "v"))
			if got == 0 {
				t.Fatalf("round %d: %s has hash %q", round, id, h)
			}
		}
		if got != want[id] && got != alt[id] {
			t.Fatalf("round %d: %s is at version %d, want %d (acknowledged) or %d (in flight)", round, id, got, want[id], alt[id])
		}
		key := strings.ReplaceAll(id, "-", "")
		lex := lexicalHits(t, round, ix, "id"+key)
		if got == 0 {
			if len(lex) != 0 {
				t.Fatalf("round %d: %s is gone, the lexical leg still finds %v", round, id, lex)
			}
			continue
		}
		doc := crashDoc(id, got)
		if len(lex) != len(doc.Chunks) {
			t.Fatalf("round %d: the lexical leg finds %v for %s v%d of %d chunks", round, lex, id, got, len(doc.Chunks))
		}
		for i := range doc.Chunks {
			part := lexicalHits(t, round, ix, fmt.Sprintf("part%sv%dc%d", key, got, i))
			if len(part) != 1 || part[0] != ChunkID(id, i) || !slices.Contains(lex, part[0]) {
				t.Fatalf("round %d: the lexical leg finds %v for %s v%d chunk %d", round, part, id, got, i)
			}
		}
		stored := docText(t, ix, id)
		if len(stored) != len(doc.Chunks) {
			t.Fatalf("round %d: %s v%d has %d chunks stored, want %d", round, id, got, len(stored), len(doc.Chunks))
		}
		for i, c := range stored {
			if c.Text != doc.Chunks[i].Text || c.ID != ChunkID(id, i) || c.Metadata["ver"] != strconv.Itoa(got) {
				t.Fatalf("round %d: %s chunk %d = %+v, want %q", round, id, i, c, doc.Chunks[i].Text)
			}
		}
		total += len(stored)
		for i, v := range doc.Vectors {
			hits, err := ix.Search(ctx, v, 1, pipeline.Filter{})
			if err != nil || len(hits) != 1 || hits[0].ID != ChunkID(id, i) {
				t.Fatalf("round %d: searching for %s chunk %d found %v (%v)", round, id, i, hits, err)
			}
			q := make([]float32, crashDim)
			normaliseInto(q, v)
			ix.mu.RLock()
			found := ix.st.annSearch(crashDim, q, 1, 4096)
			ok := len(found) == 1 && ix.st.chunks[found[0].s].ID == ChunkID(id, i)
			ix.mu.RUnlock()
			if !ok {
				t.Fatalf("round %d: the HNSW graph does not lead to %s chunk %d", round, id, i)
			}
		}
	}
	if ix.Len() != total || len(ix.Documents()) > crashDocs {
		t.Fatalf("round %d: %d chunks stored, the documents have %d: a duplicated or stray chunk", round, ix.Len(), total)
	}
	if all := lexicalHits(t, round, ix, "version"); len(all) != total {
		t.Fatalf("round %d: the lexical leg finds %d chunks, the documents have %d", round, len(all), total)
	}
}

// lexicalHits returns the chunk ids the lexical leg finds for q.
func lexicalHits(t *testing.T, round int, ix *Index, q string) []string {
	t.Helper()
	hits, err := ix.SearchText(context.Background(), q, 1000, pipeline.Filter{})
	if err != nil {
		t.Fatalf("round %d: lexical search %q: %v", round, q, err)
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	return ids
}

// crashEnvWriters, set for the child, makes it TestCrashConcurrentChild's
// writer: that many goroutines writing at once while compactions run.
const (
	crashEnvWriters = "RAGTIME_CRASH_WRITERS"
	crashWriters    = 3
)

// TestCrashConcurrentChild is the writer half of TestCrashSafetyConcurrent;
// run on its own it skips. Each of crashWriters goroutines writes the
// documents whose number is its own modulo crashWriters, printing
// "B <writer> op doc ver" before a write and "A <writer>" once it is saved,
// while the main goroutine compacts without pause (and the log's small
// threshold starts background compactions too), printing "C" after each.
func TestCrashConcurrentChild(t *testing.T) {
	dir := os.Getenv(crashEnvDir)
	if dir == "" || os.Getenv(crashEnvWriters) == "" {
		t.Skip("the writer TestCrashSafetyConcurrent runs as a child process")
	}
	seq, _ := strconv.Atoi(os.Getenv(crashEnvSeq))
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		fmt.Printf(format, a...)
		mu.Unlock()
	}
	ix, err := OpenIndex(dir, IndexOptions{Dimension: crashDim, Embedder: "test", Writable: true, CompactAfter: crashCompact})
	if err != nil {
		say("E %v\n", err)
		os.Exit(3)
	}
	ctx := context.Background()
	for w := range crashWriters {
		go func() {
			r := rand.New(rand.NewPCG(uint64(seq), uint64(w)))
			for i := 0; ; i++ {
				id := fmt.Sprintf("doc-%02d", w+crashWriters*r.IntN(crashDocs/crashWriters))
				var err error
				if r.IntN(100) < 20 {
					say("B %d delete %s 0\n", w, id)
					_, err = ix.DeleteDocument(ctx, id)
				} else {
					ver := seq + i*crashWriters + w
					say("B %d put %s %d\n", w, id, ver)
					err = ix.ReplaceDocument(ctx, crashDoc(id, ver))
				}
				if err == nil {
					err = ix.Save()
				}
				if err != nil {
					say("E %v\n", err)
					os.Exit(3)
				}
				say("A %d\n", w)
			}
		}()
	}
	r := rand.New(rand.NewPCG(uint64(seq), 99))
	for {
		if _, err := ix.Compact(ctx); err != nil {
			say("E %v\n", err)
			os.Exit(3)
		}
		say("C\n")
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
	}
}

// TestCrashSafetyConcurrent is TestCrashSafety with several writers at
// once and compactions running back to back: 40 SIGKILLs, each after a
// random number of acknowledged writes and a random moment more, so they
// land in writes, fsyncs, and every step of a compaction (its freeze, its
// files, its commit, its catching up). After each, the index must open and
// hold every acknowledged write, whole in both legs, and of the writes in
// flight (one per writer) each either whole or not at all.
func TestCrashSafetyConcurrent(t *testing.T) {
	if os.Getenv(crashEnvDir) != "" {
		t.Skip("in the child")
	}
	dataDir := t.TempDir()
	want := map[string]int{}
	r := rand.New(rand.NewPCG(21, 22))
	seq := 1
	const kills = 40
	acked, compactions := 0, 0
	seen := map[string]int{}
	for round := range kills {
		cmd, linec := startCrashChild(t, "^TestCrashConcurrentChild$", crashEnvDir+"="+dataDir, crashEnvSeq+"="+strconv.Itoa(seq), crashEnvWriters+"=1")
		var lines []string
		killAfter := r.IntN(80)
		deadline := time.After(10 * time.Second)
		acks := 0
	collect:
		for {
			select {
			case l, ok := <-linec:
				if !ok {
					break collect
				}
				lines = append(lines, l)
				if strings.HasPrefix(l, "A ") {
					acks++
				}
				if acks >= killAfter {
					time.Sleep(time.Duration(r.IntN(8000)) * time.Microsecond)
					break collect
				}
			case <-deadline:
				break collect
			}
		}
		lines = killCrashChild(cmd, linec, lines)

		inflight := map[string][]string{}
		for _, l := range lines {
			f := strings.Fields(l)
			switch {
			case strings.HasPrefix(l, "E "):
				t.Fatalf("round %d: the writer failed: %s", round, l)
			case f[0] == "B":
				inflight[f[1]] = f[2:]
				if f[2] == "put" {
					v, _ := strconv.Atoi(f[4])
					seq = max(seq, v+1)
				}
			case f[0] == "A":
				applyCrashOp(want, inflight[f[1]])
				delete(inflight, f[1])
				acked++
			case f[0] == "C":
				compactions++
			}
		}
		seq += 1000
		var ops [][]string
		for _, op := range inflight {
			ops = append(ops, op)
		}
		reopenAndCheck(t, round, dataDir, want, ops, seen)
	}
	if acked < kills*10 {
		t.Errorf("only %d writes acknowledged over %d runs: the kills came too early to test much", acked, kills)
	}
	t.Logf("%d kills, %d acknowledged writes by %d writers, %d compactions; opens after a kill found: %v",
		kills, acked, crashWriters, compactions, seen)
}
