package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"ragtime/internal/golden"
	"ragtime/llm/sim"
)

// doctorMasks replace the variable parts of doctor's output: the loopback
// ports the simulators listen on, the durations each check measured and
// the simulator's request ids.
var doctorMasks = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "127.0.0.1:PORT"},
	{regexp.MustCompile(`\bport \d+`), "port PORT"},
	{regexp.MustCompile(`\b\d+(\.\d+)? (ns|µs|ms|s)\b`), "DUR"},
	{regexp.MustCompile(`\bchatcmpl-[0-9a-z]+-\d+`), "chatcmpl-ID"},
}

// TestDoctorGolden holds doctor's whole output, line by line, for a run
// where every check passes and for the first failure of each kind that
// can be made on loopback, against real llmsim servers: a change to what
// doctor prints shows in testdata/doctor.golden's diff
// (go test ./cmd/ragtime -run Doctor -update rewrites it).
func TestDoctorGolden(t *testing.T) {
	t.Parallel()
	const key = "sk-doctor-0123456789abcd"
	_, simURL := startSim(t, func(c *sim.Config) { c.APIKey, c.Model, c.PrefillMs, c.ITLMs = key, "sim-7b", 1, 1 })
	_, anyURL := startSim(t, func(c *sim.Config) { c.PrefillMs, c.ITLMs = 1, 1 })
	_, limitedURL := startSim(t, func(c *sim.Config) { c.Faults, c.RetryAfterSeconds, c.Model = "429=1", 3, "sim-7b" })
	closed := closedAddr(t)
	openai := func(u, model string) []string {
		return []string{"doctor", "--llm-provider", "openai", "--llm-base-url", u, "--llm-model", model}
	}
	withKey := map[string]string{"RAGTIME_LLM_API_KEY": key}
	cases := []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"extractive", []string{"doctor"}, nil},
		{"all well", openai(simURL, "sim-7b"), withKey},
		{"a model answered but not listed", openai(anyURL, "any"), nil},
		{"unknown model", openai(simURL, "gpt-nope"), withKey},
		{"wrong key", openai(simURL, "sim-7b"), map[string]string{"RAGTIME_LLM_API_KEY": "sk-wrong-000000000000"}},
		{"connection refused", openai("http://"+closed+"/v1", "sim-7b"), nil},
		{"rate limited", openai(limitedURL, "sim-7b"), nil},
		{"bad flag", []string{"doctor", "--check-timeout", "soon"}, nil},
	}
	var all strings.Builder
	for _, c := range cases {
		out, _, err := runOut(t, c.env, c.args...)
		if strings.Contains(out, key) || strings.Contains(out, "0123456789") {
			t.Errorf("%s: doctor printed the key:\n%s", c.name, out)
		}
		fmt.Fprintf(&all, "== %s: %s\n%s-> %v\n\n", c.name, strings.Join(c.args, " "), out, err)
	}
	masked := all.String()
	for _, m := range doctorMasks {
		masked = m.re.ReplaceAllString(masked, m.with)
	}
	golden.Check(t, "doctor.golden", []byte(masked))
}
