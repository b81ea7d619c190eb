package retrieval

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// TestFloatBytesIsTheFileEncoding: on a little-endian machine the bytes
// floatBytes gives are the index files' encoding of the same floats
// (little-endian IEEE 754), so files written either way are the same.
func TestFloatBytesIsTheFileEncoding(t *testing.T) {
	t.Parallel()
	v := []float32{0, 1, -1, 0.5, float32(math.Pi), math.SmallestNonzeroFloat32, math.MaxFloat32, float32(math.Inf(-1))}
	var want []byte
	for _, x := range v {
		want = binary.LittleEndian.AppendUint32(want, math.Float32bits(x))
	}
	got := floatBytes(v)
	if !littleEndian {
		if got != nil {
			t.Fatal("floatBytes on a big-endian machine must leave the encoding to the slow path")
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("floatBytes = %x, the file encoding %x", got, want)
	}
	if floatBytes(nil) != nil {
		t.Error("floatBytes(nil) is not nil")
	}
}
