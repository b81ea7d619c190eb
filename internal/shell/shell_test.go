package shell

import "testing"

func TestQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain-1.2_x/y:z=a@b,c+d%": "plain-1.2_x/y:z=a@b,c+d%",
		"":                         "''",
		"two words":                "'two words'",
		"it's":                     `'it'\''s'`,
		"$HOME":                    "'$HOME'",
		"a;rm -rf /":               "'a;rm -rf /'",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}
