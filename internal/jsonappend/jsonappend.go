// Package jsonappend writes JSON strings without reflection, for the hot
// paths that frame one small JSON object per streamed token (ragtime's SSE
// token events, the simulator's chunks): encoding/json would allocate an
// encoder and reflect on every token.
package jsonappend

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// AppendString appends s as a JSON string, quotes included, exactly as
// encoding/json writes it with HTML escaping off.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendStringBody(dst, s)
	return append(dst, '"')
}

// AppendStringBody appends s escaped for the inside of a JSON string, as
// encoding/json would with HTML escaping off: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD, U+2028 and
// U+2029 escaped for JavaScript.
func AppendStringBody(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// AppendFloat appends f as encoding/json writes a float64: the shortest
// representation, in exponent form below 1e-6 and from 1e21 on. ok is
// false for NaN and infinities, which JSON cannot hold.
func AppendFloat(dst []byte, f float64) (out []byte, ok bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	n := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		if m := len(dst) - n; m >= 4 && dst[len(dst)-4] == 'e' && dst[len(dst)-3] == '-' && dst[len(dst)-2] == '0' {
			dst[len(dst)-2] = dst[len(dst)-1]
			dst = dst[:len(dst)-1]
		}
	}
	return dst, true
}

// AppendScalar appends v as encoding/json would when it is a string, a
// bool, an int or a float64 (the types of stage attributes); ok is false
// for any other type, which the caller encodes with encoding/json.
func AppendScalar(dst []byte, v any) (out []byte, ok bool) {
	switch x := v.(type) {
	case string:
		return AppendString(dst, x), true
	case bool:
		return strconv.AppendBool(dst, x), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case float64:
		return AppendFloat(dst, x)
	}
	return dst, false
}

// AppendObject appends m as encoding/json (HTML escaping off) writes a
// map[string]any, keys in byte order, when every value is one that
// AppendScalar writes (stage attributes); ok is false for any other value,
// which the caller encodes with encoding/json. A nil map is null.
func AppendObject(dst []byte, m map[string]any) (out []byte, ok bool) {
	if m == nil {
		return append(dst, "null"...), true
	}
	var stack [16]string // stage attributes are a handful: no allocation for their keys
	keys := stack[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, k)
		dst = append(dst, ':')
		if dst, ok = AppendScalar(dst, m[k]); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}
