package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"ragtime/llm/sim"
)

// TestLLMSimLoadAgainstASimulator runs `ragtime llmsim load --json` against
// a real simulator on 127.0.0.1 with a shared prefix and a prefix cache: the
// report counts every request, sizes prompts exactly and sees the cache.
func TestLLMSimLoadAgainstASimulator(t *testing.T) {
	t.Parallel()
	s, err := sim.New(sim.Config{KVCacheBlocks: 1024, PrefillMsPerToken: 0.001, ITLMs: 0.5, OutputTokens: 8, APIKey: "sekret"})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.Close()
	out := runCmd(t, map[string]string{"SIM_KEY": "sekret"}, "llmsim", "load", "--url", ts.URL+"/v1", "--rate", "40", "--duration", "1s",
		"--mix", "0.5:100,0.5:20", "--shared-prefix-tokens", "320", "--max-tokens", "4", "--api-key-env", "SIM_KEY", "--json")
	var rep struct {
		Sent, Completed, Failed int
		Failures                map[string]int
		PromptTokens            int64   `json:"prompt_tokens"`
		CachedShare             float64 `json:"cached_share"`
		TTFT                    struct {
			N   int     `json:"n"`
			P99 float64 `json:"p99_ms"`
		} `json:"ttft"`
		Classes []struct {
			PromptTokens int `json:"prompt_tokens"`
			TTFT         struct {
				N int `json:"n"`
			} `json:"ttft"`
		} `json:"classes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json printed %q: %v", out, err)
	}
	if rep.Sent < 10 || rep.Completed != rep.Sent || rep.Failed != 0 || rep.TTFT.N != rep.Completed {
		t.Fatalf("report %+v", rep)
	}
	if len(rep.Classes) != 2 || rep.Classes[0].PromptTokens != 420 || rep.Classes[1].PromptTokens != 340 ||
		rep.Classes[0].TTFT.N+rep.Classes[1].TTFT.N != rep.Completed {
		t.Errorf("classes %+v", rep.Classes)
	}
	if rep.CachedShare <= 0.5 {
		t.Errorf("cached share %.2f: the 320-token prefix should be cached from the second request on", rep.CachedShare)
	}
	// the server counts a request after its last write, which the client
	// may read first
	eventually(t, "the simulator to count every completed request", func() bool { return s.Stats().Completed == int64(rep.Completed) })
}

func TestLLMSimLoadUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "http://10.0.0.1:8081/v1"}, "must point at this machine"},
		{[]string{"--mix", "0.5:100"}, "--mix: shares add up to 0.5"},
		{[]string{"--rate", "0"}, "rate must be"},
		{[]string{"--api-key-env", "NOPE"}, "--api-key-env"},
	} {
		var out, errOut syncBuffer
		err := run(context.Background(), append([]string{"llmsim", "load"}, tt.args...), envMap(nil), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) || exitCode(err) != 2 {
			t.Errorf("%v: got %v (exit %d), want a usage error with %q", tt.args, err, exitCode(err), tt.want)
		}
	}
	var out, errOut syncBuffer
	_ = run(context.Background(), []string{"llmsim", "--help"}, envMap(nil), &out, &errOut)
	for _, want := range []string{"SIMULATOR", "llmsim load", "-embed-ms ", "-rerank-ms-per-doc", "-chunked-prefill-tokens"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("llmsim --help does not mention %s", want)
		}
	}
}
