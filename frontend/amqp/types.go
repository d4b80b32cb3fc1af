package amqp

import (
	"encoding/hex"
	"fmt"
	"time"
)

// Format codes of the AMQP 1.0 type system (spec part 1.6).
const (
	codeDescribed  = 0x00
	codeNull       = 0x40
	codeTrue       = 0x41
	codeFalse      = 0x42
	codeUint0      = 0x43
	codeUlong0     = 0x44
	codeList0      = 0x45
	codeUbyte      = 0x50
	codeByte       = 0x51
	codeSmallUint  = 0x52
	codeSmallUlong = 0x53
	codeSmallInt   = 0x54
	codeSmallLong  = 0x55
	codeBool       = 0x56
	codeUshort     = 0x60
	codeShort      = 0x61
	codeUint       = 0x70
	codeInt        = 0x71
	codeFloat      = 0x72
	codeChar       = 0x73
	codeDecimal32  = 0x74
	codeUlong      = 0x80
	codeLong       = 0x81
	codeDouble     = 0x82
	codeTimestamp  = 0x83
	codeDecimal64  = 0x84
	codeDecimal128 = 0x94
	codeUUID       = 0x98
	codeVbin8      = 0xa0
	codeStr8       = 0xa1
	codeSym8       = 0xa3
	codeVbin32     = 0xb0
	codeStr32      = 0xb1
	codeSym32      = 0xb3
	codeList8      = 0xc0
	codeMap8       = 0xc1
	codeList32     = 0xd0
	codeMap32      = 0xd1
	codeArray8     = 0xe0
	codeArray32    = 0xf0
)

// Symbol is an AMQP symbol: ASCII text used for names and keys.
type Symbol string

// Char is an AMQP char: one UTF-32 code point.
type Char rune

// UUID is an AMQP uuid, in RFC 4122 byte order.
type UUID [16]byte

// String formats the UUID in the canonical 8-4-4-4-12 form.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// Decimal32, Decimal64 and Decimal128 carry IEEE 754 decimal floating point
// values opaquely: the engine never does arithmetic on them, it only keeps
// their bytes so that they survive a round trip.
type (
	Decimal32  [4]byte
	Decimal64  [8]byte
	Decimal128 [16]byte
)

// Described is a value with a descriptor (a symbol or an ulong) that gives
// it an application meaning.
type Described struct {
	Descriptor any
	Value      any
}

// Pair is one entry of a Map.
type Pair struct {
	Key   any
	Value any
}

// Map is an AMQP map. It keeps the peer's order and allows keys that Go
// maps cannot hold (binary keys), so a decoded map encodes back to the same
// bytes.
type Map []Pair

// Get returns the value stored under key. Keys compare by type and value:
// Symbol("a") and "a" are different keys, as they are on the wire.
func (m Map) Get(key any) (any, bool) {
	for _, p := range m {
		if keyEqual(p.Key, key) {
			return p.Value, true
		}
	}
	return nil, false
}

// Set replaces the value under key, or appends the pair when key is new.
func (m *Map) Set(key, value any) {
	for i, p := range *m {
		if keyEqual(p.Key, key) {
			(*m)[i].Value = value
			return
		}
	}
	*m = append(*m, Pair{Key: key, Value: value})
}

// Delete removes key from the map, keeping the order of the rest.
func (m *Map) Delete(key any) {
	for i, p := range *m {
		if keyEqual(p.Key, key) {
			*m = append((*m)[:i], (*m)[i+1:]...)
			return
		}
	}
}

func keyEqual(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && string(ab) == string(bb)
	}
	if _, ok := b.([]byte); ok {
		return false
	}
	defer func() { _ = recover() }() // uncomparable keys (lists, maps) never match
	return a == b
}

// Array is an AMQP array whose elements are not one of the primitive types
// that decode into a typed Go slice (for example an array of described
// values or of lists). Constructor is the element format code; Descriptor is
// set when the elements are described.
type Array struct {
	Descriptor  any
	Constructor byte
	Elems       []any
}

// Null-able scalar helpers keep field structs readable: a nil pointer is an
// absent (null) field.

func ptr[T any](v T) *T { return &v }

// timestampFromMillis converts an AMQP timestamp (ms since the Unix epoch)
// to a UTC time.
func timestampFromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func typeName(code byte) string {
	switch code {
	case codeDescribed:
		return "described"
	case codeNull:
		return "null"
	case codeTrue, codeFalse, codeBool:
		return "boolean"
	case codeUbyte:
		return "ubyte"
	case codeUshort:
		return "ushort"
	case codeUint, codeSmallUint, codeUint0:
		return "uint"
	case codeUlong, codeSmallUlong, codeUlong0:
		return "ulong"
	case codeByte:
		return "byte"
	case codeShort:
		return "short"
	case codeInt, codeSmallInt:
		return "int"
	case codeLong, codeSmallLong:
		return "long"
	case codeFloat:
		return "float"
	case codeDouble:
		return "double"
	case codeDecimal32:
		return "decimal32"
	case codeDecimal64:
		return "decimal64"
	case codeDecimal128:
		return "decimal128"
	case codeChar:
		return "char"
	case codeTimestamp:
		return "timestamp"
	case codeUUID:
		return "uuid"
	case codeVbin8, codeVbin32:
		return "binary"
	case codeStr8, codeStr32:
		return "string"
	case codeSym8, codeSym32:
		return "symbol"
	case codeList0, codeList8, codeList32:
		return "list"
	case codeMap8, codeMap32:
		return "map"
	case codeArray8, codeArray32:
		return "array"
	}
	return fmt.Sprintf("0x%02x", code)
}
