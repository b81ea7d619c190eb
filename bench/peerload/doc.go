// Command peerload is the load client of `make bench-peer`: it opens N
// concurrent SSE streams against the inference simulator directly, against
// ragtime's /ask, against the LangChain.js peer's /ask and against
// bench/relay (the floor: the same two upstream calls and one read and one
// write per token, nothing else), in alternation
// over several rounds, and prints per concurrency the TTFT each adds over the
// simulator, asks per second, CPU milliseconds per ask and RSS of each
// process (read from /proc/<pid>), with their ratios. For ragtime it also
// prints the client-observed TTFT minus ragtime's own ttft_ms, the embed
// stage against the simulator's modelled latency, embed errors, and the
// sockets left in TIME_WAIT towards the simulator.
//
// With -hold N it instead holds N streams open (each asking again when its
// answer ends) and measures short probe asks, one at a time and spaced by
// -hold-probe-every over the held streams' whole cycle, against the idle
// server's: the TTFT a newcomer sees, how the probes that started in a wave
// of re-asks fared against the others, RSS per open stream, the CPU of the
// target, llmsim, this client and PostgreSQL, the target's threads' context
// switches, how long the target's goroutines waited to run, and for
// ragtime where the probes' TTFT went: the time outside its clock (the
// client's TTFT minus ttft_ms), its overhead_ms and each stage before the
// first token, as medians for the idle and the held probes and whole for
// the slowest held ones (make bench-streams). With -hold-profile and -hold-pprof it also takes the
// target's CPU profile from its profiler, from the first held probe, so
// that ragtime's and the relay's profiles cover the same phase.
//
// Everything is bounded: asks per stream, a time limit per trial, loopback
// addresses only. See docs/performance.md for how to read the table.
package main
