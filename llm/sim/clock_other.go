//go:build !linux

package sim

import "errors"

// newHRTimer reports that only the runtime's timers (about a millisecond
// late when idle) are available on this platform.
func newHRTimer() (hrTimer, error) {
	return nil, errors.New("no high-resolution timer on this platform")
}
