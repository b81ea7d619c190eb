package rxstamp_test

import (
	"testing"

	"ragtime/internal/rxstamp"
	"ragtime/internal/rxstamp/rxstamptest"
)

// BenchmarkRead is one 300-byte write over loopback and its read (a
// streamed chunk's size), with a plain net.Conn read and with a stamped
// one: what the stamp costs a read.
func BenchmarkRead(b *testing.B) {
	for _, stamped := range []bool{false, true} {
		name := "plain"
		if stamped {
			name = "stamped"
		}
		b.Run(name, func(b *testing.B) {
			client, c := rxstamptest.Dial(b, nil)
			read := c.Read
			if stamped {
				rx := rxstamp.Enable(c)
				if rx == nil {
					b.Skip("no receive stamps here")
				}
				read = func(p []byte) (int, error) { n, _, err := rx.Read(p); return n, err }
			}
			buf, msg := make([]byte, 4096), make([]byte, 300)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
