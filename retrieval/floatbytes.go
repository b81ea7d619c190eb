package retrieval

import (
	"encoding/binary"
	"unsafe"
)

// littleEndian is whether this machine stores a float32 as the index files
// do: little-endian IEEE 754 (every platform Go runs on but the big-endian
// ones).
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// floatBytes returns v's memory as bytes when the machine is little-endian
// (nil otherwise, or for an empty v), so that the snapshot's vectors are
// written and read as they lie in memory instead of one conversion per
// component, which was a third of an open's CPU. Written by hand because
// encoding/binary converts element by element.
func floatBytes(v []float32) []byte {
	if !littleEndian || len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}
