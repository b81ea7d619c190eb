// Package shell writes command lines a user can paste into a POSIX shell:
// the commands ragtime prints for the user to run (serve's flags for a
// provider, the sweep's rerun of its recommendation).
package shell

import "strings"

// Quote quotes s for a POSIX shell when it holds anything but safe
// characters.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
