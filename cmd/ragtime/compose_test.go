package main

import (
	"context"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// TestComposeFile loads compose.yaml with compose-go (the loader docker
// compose itself uses; no compose plugin is installed here) and checks that
// every service ragtime needs is there with a healthcheck, that ragtime
// starts after them, and that every RAGTIME_ variable it sets names a flag
// of the command it runs.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	path, _ := filepath.Abs("../../compose.yaml")
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithName("ragtime"), cli.WithWorkingDirectory("../.."), cli.WithInterpolation(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml does not load: %v", err)
	}
	svc := func(name string) types.ServiceConfig {
		t.Helper()
		s, err := p.GetService(name)
		if err != nil {
			t.Fatalf("compose.yaml has no %s service: %v", name, err)
		}
		return s
	}
	for _, name := range []string{"postgres", "qdrant", "ollama", "ragtime", "grafana"} {
		if hc := svc(name).HealthCheck; hc == nil || len(hc.Test) == 0 || hc.Disable {
			t.Errorf("service %s has no healthcheck", name)
		}
	}
	if img := svc("postgres").Image; !strings.HasPrefix(img, "postgres:16") {
		t.Errorf("postgres image %q, want postgres:16", img)
	}
	if vols := svc("postgres").Volumes; len(vols) == 0 || vols[0].Type != types.VolumeTypeVolume {
		t.Errorf("postgres keeps no named volume: %v", vols)
	}
	pull := svc("ollama-pull")
	if pull.Restart != "no" || !strings.Contains(strings.Join(pull.Entrypoint, " "), "nomic-embed-text") {
		t.Errorf("ollama-pull %v %v: want a one-shot pulling the embedding model", pull.Restart, pull.Entrypoint)
	}

	rt := svc("ragtime")
	if rt.Build == nil || rt.Build.Context == "" {
		t.Error("ragtime is not built from the Dockerfile")
	}
	for dep, cond := range map[string]string{
		"postgres": types.ServiceConditionHealthy, "qdrant": types.ServiceConditionHealthy,
		"ollama": types.ServiceConditionHealthy, "ingest": types.ServiceConditionCompletedSuccessfully,
	} {
		if d, ok := rt.DependsOn[dep]; !ok || d.Condition != cond {
			t.Errorf("ragtime depends on %s with %+v, want condition %s", dep, d, cond)
		}
	}
	gf := svc("grafana")
	var mounts []string
	for _, v := range gf.Volumes {
		mounts = append(mounts, v.Target)
	}
	if !strings.Contains(strings.Join(mounts, " "), "/etc/grafana/provisioning") || !strings.Contains(strings.Join(mounts, " "), "/var/lib/grafana/dashboards") {
		t.Errorf("grafana mounts %v: want the provisioning and dashboard folders", mounts)
	}

	// Every RAGTIME_ variable must name a flag of the command the service
	// runs, checked against the real flag sets.
	flagsOf := map[string]*flag.FlagSet{}
	env := &environment{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard}
	serve := newFlagSet(env, "serve", "")
	var sc serveConfig
	sc.register(serve)
	flagsOf["serve"] = serve
	ingest := newFlagSet(env, "ingest", "")
	var pc partsConfig
	pc.register(ingest)
	flagsOf["ingest"] = ingest
	for _, name := range []string{"ragtime", "ingest"} {
		s := svc(name)
		fs := flagsOf[s.Command[0]]
		if fs == nil {
			t.Fatalf("service %s runs %q, not serve or ingest", name, s.Command)
		}
		seen := 0
		for k, v := range s.Environment {
			if !strings.HasPrefix(k, "RAGTIME_") {
				continue
			}
			seen++
			f := fs.Lookup(strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "RAGTIME_")), "_", "-"))
			if f == nil {
				t.Errorf("service %s sets %s, but `ragtime %s` has no such flag", name, k, s.Command[0])
				continue
			}
			if v != nil {
				if err := fs.Set(f.Name, *v); err != nil {
					t.Errorf("service %s: %s=%q is not a valid --%s: %v", name, k, *v, f.Name, err)
				}
			}
		}
		if seen < 5 {
			t.Errorf("service %s sets only %d RAGTIME_ variables", name, seen)
		}
	}
	if sc.parts.store != "qdrant" || sc.parts.embedder != "ollama" || sc.parts.qdrantURL != "qdrant:6334" {
		t.Errorf("ragtime is configured with store %q embedder %q qdrant %q, want qdrant + ollama", sc.parts.store, sc.parts.embedder, sc.parts.qdrantURL)
	}
}
