package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --redis-url comes from the flag, RAGTIME_REDIS_URL or the config file's
// redis section, and `ragtime config` shows it without its password; a URL
// that is not Redis's is refused naming the flag, also without it.
func TestRedisURLSourcesAndRedaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "ragtime.toml")
	if err := os.WriteFile(file, []byte("[redis]\nurl = \"redis://:filesecret@redis:6379/2\"\nkey_prefix = \"blue:\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runOut(t, nil, "config", "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if row := configRow(t, out, "redis-url"); row[1] != "redis://:xxxxx@redis:6379/2" || !strings.HasPrefix(row[2], "file") {
		t.Errorf("redis-url row %v", row)
	}
	if row := configRow(t, out, "redis-prefix"); row[1] != "blue:" {
		t.Errorf("redis-prefix row %v", row)
	}
	out, _, err = runOut(t, map[string]string{"RAGTIME_REDIS_URL": "redis://:envsecret@127.0.0.1:6379/0"}, "config")
	if err != nil {
		t.Fatal(err)
	}
	if row := configRow(t, out, "redis-url"); row[1] != "redis://:xxxxx@127.0.0.1:6379/0" || !strings.HasPrefix(row[2], "env") {
		t.Errorf("redis-url row %v", row)
	}
	for _, secret := range []string{"filesecret", "envsecret"} {
		if strings.Contains(out, secret) {
			t.Errorf("config printed the password %s:\n%s", secret, out)
		}
	}
	_, errOut, err := runOut(t, nil, "serve", "--redis-url", "http://:badsecret@127.0.0.1:6379")
	if err == nil || !strings.Contains(err.Error(), "--redis-url must start with redis://") || strings.Contains(err.Error()+errOut, "badsecret") {
		t.Errorf("serve with an http:// --redis-url: %v %s", err, errOut)
	}
}
