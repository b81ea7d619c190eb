package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// configKeys maps the keys of a config file's llm section to the flags
// they set. They are the keys people already write for these channels;
// the key itself is never read from a file, only the NAME of the variable
// holding it (api_key_env).
var configKeys = map[string]string{
	"provider":             "llm-provider",
	"base_url":             "llm-base-url",
	"api_key_env":          "llm-api-key-env",
	"default_model":        "llm-model",
	"timeout_seconds":      "llm-timeout",
	"ttft_timeout_seconds": "llm-ttft-timeout",
	"max_retries":          "llm-max-retries",
}

// serveConfigKeys maps the keys of a config file's serve section to the
// flags they set: the defaults an ask gets when it omits them, which the
// sweep's recommendation prints as a snippet of this section.
var serveConfigKeys = map[string]string{
	"top_k":              "top-k",
	"rerank_top_n":       "rerank-top-n",
	"max_context_tokens": "max-context-tokens",
	"retrieval":          "retrieval",
	"vector_k":           "vector-k",
	"lexical_k":          "lexical-k",
	"collapse":           "collapse",
	"otlp_endpoint":      "otlp-endpoint",
	"otlp_protocol":      "otlp-protocol",
	"trace_url_template": "trace-url-template",
}

// qdrantConfigKeys maps the keys of a config file's qdrant section to the
// flags they set: where the collection is and how it is spread over a
// Qdrant cluster (docs/scaling.md). The API key is never read from a file.
var qdrantConfigKeys = map[string]string{
	"url":                      "qdrant-url",
	"collection":               "qdrant-collection",
	"api_key_env":              "qdrant-api-key-env",
	"shard_number":             "qdrant-shards",
	"replication_factor":       "qdrant-replication-factor",
	"write_consistency_factor": "qdrant-write-consistency-factor",
	"on_disk_vectors":          "qdrant-on-disk-vectors",
	"on_disk_payload":          "qdrant-on-disk-payload",
	"read_consistency":         "qdrant-read-consistency",
	"tenant_key":               "qdrant-tenant-key",
}

// redisConfigKeys maps the keys of a config file's redis section to the
// flags they set: the Redis that replicas share limits and streams through
// (docs/scaling.md). The URL may hold a password; it is never logged.
var redisConfigKeys = map[string]string{
	"url":        "redis-url",
	"key_prefix": "redis-prefix",
}

// configKeyOf names the file key behind a flag, for errors.
func configKeyOf(flagName string) string {
	for k, f := range redisConfigKeys {
		if f == flagName {
			return "redis." + k
		}
	}
	for k, f := range qdrantConfigKeys {
		if f == flagName {
			return "qdrant." + k
		}
	}
	for k, f := range configKeys {
		if f == flagName {
			return "llm." + k
		}
	}
	for k, f := range serveConfigKeys {
		if f == flagName {
			return "serve." + k
		}
	}
	return flagName
}

// loadConfigFile reads a JSON or TOML file (by extension; otherwise JSON
// when it starts with '{') and returns flag values by flag name. Unknown
// keys in the llm section are errors naming the key; other top-level
// sections are left to other tools.
func loadConfigFile(path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, &usageError{msg: fmt.Sprintf("--config: reading %s: %v", path, err)}
	}
	return parseConfigFile(path, raw)
}

// parseConfigFile is loadConfigFile on the content raw of the file path.
func parseConfigFile(path string, raw []byte) (map[string]string, error) {
	var err error
	var doc map[string]any
	ext := strings.ToLower(filepath.Ext(path))
	isJSON := ext == ".json" || (ext != ".toml" && bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")))
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		err = dec.Decode(&doc)
	} else {
		_, err = toml.Decode(string(raw), &doc)
	}
	if err != nil {
		kind := "TOML"
		if isJSON {
			kind = "JSON"
		}
		return nil, &usageError{msg: fmt.Sprintf("--config %s is not valid %s: %v", path, kind, err)}
	}
	section, ok := doc["llm"]
	_, hasServe := doc["serve"]
	_, hasQdrant := doc["qdrant"]
	_, hasRedis := doc["redis"]
	if !ok && !hasServe && !hasQdrant && !hasRedis {
		return nil, &usageError{msg: fmt.Sprintf("--config %s has no llm section (want keys %s), serve section (want keys %s), qdrant section (want keys %s) nor redis section (want keys %s)", path,
			strings.Join(sortedKeys(), ", "), strings.Join(slices.Sorted(maps.Keys(serveConfigKeys)), ", "), strings.Join(slices.Sorted(maps.Keys(qdrantConfigKeys)), ", "),
			strings.Join(slices.Sorted(maps.Keys(redisConfigKeys)), ", "))}
	}
	out := map[string]string{}
	for _, sec := range []struct {
		name string
		keys map[string]string
	}{{"serve", serveConfigKeys}, {"qdrant", qdrantConfigKeys}, {"redis", redisConfigKeys}} {
		raw, has := doc[sec.name]
		if !has {
			continue
		}
		table, isMap := raw.(map[string]any)
		if !isMap {
			return nil, &usageError{msg: fmt.Sprintf("--config %s: %s must be a table/object, got %T", path, sec.name, raw)}
		}
		for k, v := range table {
			flagName, known := sec.keys[k]
			if sec.name == "qdrant" && (k == "api_key" || k == "key") {
				return nil, &usageError{msg: fmt.Sprintf("--config %s: qdrant.%s: the key itself is never read from a file; put it in an environment variable and name that variable with api_key_env", path, k)}
			}
			if !known {
				return nil, &usageError{msg: fmt.Sprintf("--config %s: unknown key %s.%s (known: %s)", path, sec.name, k, strings.Join(slices.Sorted(maps.Keys(sec.keys)), ", "))}
			}
			s, err := configValue(k, v)
			if err != nil {
				return nil, &usageError{msg: fmt.Sprintf("--config %s: %s.%s: %v", path, sec.name, k, err)}
			}
			out[flagName] = s
		}
	}
	if !ok {
		return out, nil
	}
	llm, ok := section.(map[string]any)
	if !ok {
		return nil, &usageError{msg: fmt.Sprintf("--config %s: llm must be a table/object, got %T", path, section)}
	}
	for k, v := range llm {
		flagName, known := configKeys[k]
		if k == "api_key" || k == "key" {
			return nil, &usageError{msg: fmt.Sprintf("--config %s: llm.%s: the key itself is never read from a file; put it in an environment variable and name that variable with api_key_env", path, k)}
		}
		if !known {
			return nil, &usageError{msg: fmt.Sprintf("--config %s: unknown key llm.%s (known: %s)", path, k, strings.Join(sortedKeys(), ", "))}
		}
		s, err := configValue(k, v)
		if err != nil {
			return nil, &usageError{msg: fmt.Sprintf("--config %s: llm.%s: %v", path, k, err)}
		}
		out[flagName] = s
	}
	return out, nil
}

// maxConfigSeconds is the longest timeout a config file may give: the
// largest whole number of seconds a time.Duration holds.
const maxConfigSeconds = float64(math.MaxInt64 / int64(time.Second))

// configValue renders a file value as the flag's text.
func configValue(key string, v any) (string, error) {
	num := func() (float64, error) {
		switch n := v.(type) {
		case json.Number:
			return n.Float64()
		case int64:
			return float64(n), nil
		case float64:
			return n, nil
		}
		return 0, fmt.Errorf("want a number, got %v (%T)", v, v)
	}
	switch key {
	case "timeout_seconds", "ttft_timeout_seconds":
		f, err := num()
		if err != nil {
			return "", err
		}
		// Finite, and within what a time.Duration holds (NaN, Inf and 1e300
		// would otherwise become flag text the flag refuses).
		if !(f >= 0 && f <= maxConfigSeconds) {
			return "", fmt.Errorf("want seconds from 0 to %d, got %v", int64(maxConfigSeconds), f)
		}
		return strconv.FormatFloat(f, 'f', -1, 64) + "s", nil
	case "on_disk_vectors", "on_disk_payload":
		b, ok := v.(bool)
		if !ok {
			return "", fmt.Errorf("want true or false, got %v (%T)", v, v)
		}
		return strconv.FormatBool(b), nil
	case "read_consistency":
		if _, isText := v.(string); !isText {
			f, err := num()
			if err != nil || f < 1 || f != float64(int(f)) {
				return "", fmt.Errorf("want all, majority, quorum or a whole number of replicas ≥ 1, got %v", v)
			}
			return strconv.Itoa(int(f)), nil
		}
	case "max_retries", "top_k", "rerank_top_n", "max_context_tokens", "vector_k", "lexical_k", "shard_number", "replication_factor", "write_consistency_factor":
		f, err := num()
		if err != nil {
			return "", err
		}
		if f < 0 || f != float64(int(f)) {
			return "", fmt.Errorf("want a whole number ≥ 0, got %v", f)
		}
		return strconv.Itoa(int(f)), nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %v (%T)", v, v)
	}
	return s, nil
}

func sortedKeys() []string {
	keys := make([]string, 0, len(configKeys))
	for k := range configKeys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
