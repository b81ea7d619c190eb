// Package rxstamp reads the kernel's receive stamps of TCP connections: when
// the bytes a read returns reached the socket, as opposed to when the
// reading goroutine got to read them. Under CPU starvation the two differ
// by the goroutine's wait to run, and a clock that starts or stops at the
// read counts that wait on the wrong side.
//
// On Linux a socket asks for software receive stamps (SO_TIMESTAMPING with
// SOF_TIMESTAMPING_RX_SOFTWARE) and a read is a recvmsg, through the
// runtime's poller so that deadlines hold, whose control message carries
// the stamp of the last segment read. The kernel turns stamping on a moment
// after the first socket asks for it and off once none does: a listener
// that asks (Listen) keeps it on for as long as it listens, and the
// connections it accepts inherit the option.
//
// Elsewhere Enable returns nil and callers fall back to the read's own
// time. Written by hand because neither the standard library nor x/sys
// reads TCP receive stamps through the poller.
package rxstamp
