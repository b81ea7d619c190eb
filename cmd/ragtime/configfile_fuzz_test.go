package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// FuzzConfigFile parses arbitrary config files, as JSON and as TOML. It
// never panics; an error is a usage error naming the file; what is
// accepted is a known flag with a value that flag parses (a duration, a
// whole number); and the accepted llm section, written out again as JSON and
// as TOML, parses to the same flags.
func FuzzConfigFile(f *testing.F) {
	for _, s := range []string{
		`{"llm":{"provider":"openai","base_url":"https://taotoken.net/api","api_key_env":"TAO_KEY","default_model":"m","timeout_seconds":30,"ttft_timeout_seconds":2.5,"max_retries":2}}`,
		"[llm]\nprovider = \"anthropic\"\ntimeout_seconds = 12\nmax_retries = 0\n",
		`{"llm":{"api_key":"sk-x"}}`, `{"llm":[]}`, `{}`, `{"llm":{"max_retries":1.5}}`, `{"llm":{"timeout_seconds":-1}}`,
		"[llm]\ntimeout_seconds = nan\n", "[llm]\ntimeout_seconds = inf\n", `{"llm":{"timeout_seconds":1e300}}`,
		"[llm]\nmax_retries = 9223372036854775807\n", `{"llm":{"provider":1}}`, "not a config",
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, asJSON bool) {
		name := "ragtime.toml"
		if asJSON {
			name = "ragtime.json"
		}
		flags, err := parseConfigFile(name, raw)
		if err != nil {
			var ue *usageError
			if !errors.As(err, &ue) || !strings.HasPrefix(ue.msg, "--config "+name) {
				t.Fatalf("error %v (%T): want a usage error naming %s", err, err, name)
			}
			return
		}
		section := map[string]any{}
		for flagName, v := range flags {
			key := strings.TrimPrefix(configKeyOf(flagName), "llm.")
			if configKeys[key] != flagName {
				t.Fatalf("accepted unknown flag %s", flagName)
			}
			switch key {
			case "timeout_seconds", "ttft_timeout_seconds":
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					t.Fatalf("llm.%s became %q, which --%s refuses: %v", key, v, flagName, err)
				}
				section[key] = d.Seconds()
			case "max_retries":
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					t.Fatalf("llm.max_retries became %q", v)
				}
				section[key] = n
			default:
				section[key] = v
			}
		}
		js, err := json.Marshal(map[string]any{"llm": section})
		if err != nil {
			t.Fatal(err)
		}
		var tb bytes.Buffer
		if err := toml.NewEncoder(&tb).Encode(map[string]any{"llm": section}); err != nil {
			t.Fatal(err)
		}
		for _, again := range []struct{ name, raw string }{{"again.json", string(js)}, {"again.toml", tb.String()}} {
			got, err := parseConfigFile(again.name, []byte(again.raw))
			if err != nil {
				t.Fatalf("the accepted section, written as %s, is refused: %v\n%s", again.name, err, again.raw)
			}
			if !maps.Equal(got, flags) {
				t.Fatalf("round trip through %s changed the flags:\n%v\n%v", again.name, flags, got)
			}
		}
	})
}
