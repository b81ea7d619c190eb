package tokens

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// BPEDirEnv names the environment variable holding the directory New reads
// the BPE files of the encodings that are not embedded from
// (cl100k_base.tiktoken, p50k_base.tiktoken, r50k_base.tiktoken, as
// OpenAI publishes them). Only DefaultEncoding is embedded: the other
// three would add 3.4 MB to every binary for a choice few make.
const BPEDirEnv = "RAGTIME_BPE_DIR"

// BPEURL is where OpenAI publishes the BPE file of an encoding.
const BPEURL = "https://openaipublic.blob.core.windows.net/encodings/"

//go:embed bpe/o200k_base.tiktoken
var embedded embed.FS

// bpeSHA256 is the SHA-256 of each encoding's BPE file as OpenAI publishes
// it (tiktoken checks the same): a file read from BPEDirEnv must match.
var bpeSHA256 = map[string]string{
	"o200k_base":  "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
	"cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
	"p50k_base":   "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069",
	"r50k_base":   "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
}

// bpeDir returns the file system the non-embedded BPE files are read from:
// the directory BPEDirEnv names, nil when it is unset. Tests replace it.
var bpeDir = func() fs.FS {
	if dir := os.Getenv(BPEDirEnv); dir != "" {
		return os.DirFS(dir)
	}
	return nil
}

// loadRanks reads the named encoding's BPE file (embedded, else from
// bpeDir), checks its checksum and parses its "base64-token rank" lines.
func loadRanks(name string) (map[string]int, error) { return loadRanksFrom(name, bpeDir()) }

// loadRanksFrom is loadRanks with the directory given (nil: none).
func loadRanksFrom(name string, dir fs.FS) (map[string]int, error) {
	file := name + ".tiktoken"
	data, err := embedded.ReadFile("bpe/" + file)
	if err != nil {
		if dir == nil {
			return nil, fmt.Errorf("%s is not embedded in this binary: set %s to a directory holding %s (from %s%s)",
				name, BPEDirEnv, file, BPEURL, file)
		}
		if data, err = fs.ReadFile(dir, file); err != nil {
			return nil, fmt.Errorf("read %s from %s: %w", file, BPEDirEnv, err)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != bpeSHA256[name] {
			return nil, fmt.Errorf("%s from %s: SHA-256 %s, want %s (OpenAI's %s%s)", file, BPEDirEnv, got, bpeSHA256[name], BPEURL, file)
		}
	}
	return parseRanks(file, data)
}

// parseRanks parses a tiktoken BPE file: one "base64-token rank" per line.
func parseRanks(file string, data []byte) (map[string]int, error) {
	ranks := make(map[string]int, bytes.Count(data, []byte("\n")))
	for n, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		tok, rank, ok := bytes.Cut(line, []byte(" "))
		if !ok {
			return nil, fmt.Errorf("%s line %d: want a token and a rank", file, n+1)
		}
		token, err := base64.StdEncoding.DecodeString(string(tok))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: token: %w", file, n+1, err)
		}
		r, err := strconv.Atoi(string(rank))
		if err != nil {
			return nil, fmt.Errorf("%s line %d: rank: %w", file, n+1, err)
		}
		ranks[string(token)] = r
	}
	return ranks, nil
}
