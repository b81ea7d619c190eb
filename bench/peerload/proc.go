package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// clkTck is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every
// Linux architecture Go supports.
const clkTck = 100

// cpuMs is the CPU time (user + system, all threads) process pid has used,
// in milliseconds; 0 when pid is 0 or unreadable.
func cpuMs(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at the
	// state, field 3; utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) * 1000 / clkTck
}

// writeCalls is how many write system calls process pid has made
// (/proc/<pid>/io's syscw, which counts write and writev calls, whatever
// they wrote); 0 when pid is 0 or unreadable. Reads are not counted: the
// kernel's syscr counts read and readv but not recvmsg, with which ragtime
// reads its sockets (to take their receive stamps, package rxstamp), so a
// read count would compare ragtime's few plain reads with the others' all.
func writeCalls(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	return procCounters(b, "syscw")[0]
}

// procCounters reads the integer counters names from the "name: value"
// lines of a /proc file (io, status), in the order of names; a counter
// that is missing or unparsable reads 0.
func procCounters(b []byte, names ...string) []int64 {
	out := make([]int64, len(names))
	for line := range strings.Lines(string(b)) {
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if i := slices.Index(names, name); i >= 0 {
			out[i], _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return out
}

// ctxSwitches is how many times process pid's threads have gone to sleep
// (voluntary: a wait on I/O, a futex, a timer) and been taken off the CPU
// by the kernel (nonvoluntary), summed over /proc/<pid>/task/*/status,
// since a thread's counts are its own; a thread that exits drops out of the
// sum. 0, 0 when pid is 0 or unreadable.
func ctxSwitches(pid int) (voluntary, nonvoluntary int64) {
	if pid <= 0 {
		return 0, 0
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, 0
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		c := procCounters(b, "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")
		voluntary, nonvoluntary = voluntary+c[0], nonvoluntary+c[1]
	}
	return voluntary, nonvoluntary
}

// rssKB is the resident set size of process pid, in KB.
func rssKB(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// timeWaitTo returns the sockets in TIME_WAIT whose remote port is port
// (connections this machine closed towards that server), keyed by their
// address pair.
func timeWaitTo(port int) map[string]bool {
	out := map[string]bool{}
	if port <= 0 {
		return out
	}
	want := fmt.Sprintf(":%04X", port)
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "06" || !strings.HasSuffix(fields[2], want) {
				continue
			}
			out[fields[1]+" "+fields[2]] = true
		}
		f.Close()
	}
	return out
}

// newTimeWait counts the TIME_WAIT sockets in after that were not in before.
func newTimeWait(before, after map[string]bool) int {
	n := 0
	for k := range after {
		if !before[k] {
			n++
		}
	}
	return n
}

// cpuMsOf is the CPU time every process on this machine whose command is
// comm (/proc/<pid>/comm) has used, in milliseconds: PostgreSQL's backends
// and helpers, which record ragtime's answers on the same cores. A process
// that exits in between drops out of the sum (serve's pool keeps its
// connections, so its backends stay).
func cpuMsOf(comm string) float64 {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	total := 0.0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			total += cpuMs(pid)
		}
	}
	return total
}
