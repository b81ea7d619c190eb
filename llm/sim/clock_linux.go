package sim

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfd is a Linux timerfd read through the runtime's poller: its expiry
// wakes an idle scheduler within microseconds (kernel hrtimers carry no
// timer slack), where an epoll timeout rounds to milliseconds.
type timerfd struct {
	fd int
	f  *os.File
	ch chan struct{}
}

func newHRTimer() (hrTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	t := &timerfd{fd: fd, f: os.NewFile(uintptr(fd), "llmsim-timerfd"), ch: make(chan struct{}, 1)}
	go t.read()
	return t, nil
}

// read forwards each expiry to ch until the file is closed.
func (t *timerfd) read() {
	var buf [8]byte
	for {
		if _, err := t.f.Read(buf[:]); err != nil {
			return // closed; the runtime timer alone serves any other failure
		}
		select {
		case t.ch <- struct{}{}:
		default:
		}
	}
}

func (t *timerfd) arm(d time.Duration) {
	if d <= 0 {
		d = 1 // zero would disarm
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	_ = unix.TimerfdSettime(t.fd, 0, &spec, nil) // cannot fail on a valid fd and spec; the runtime timer backs it up
}

func (t *timerfd) fired() <-chan struct{} { return t.ch }

func (t *timerfd) close() { _ = t.f.Close() }
