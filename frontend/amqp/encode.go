package amqp

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// The append functions encode one value each, choosing the most compact
// encoding the spec allows. They never fail; appendValue fails only for Go
// types that have no AMQP form.

func appendNull(b []byte) []byte { return append(b, codeNull) }

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, codeTrue)
	}
	return append(b, codeFalse)
}

func appendUbyte(b []byte, v uint8) []byte { return append(b, codeUbyte, v) }

func appendUshort(b []byte, v uint16) []byte {
	return binary.BigEndian.AppendUint16(append(b, codeUshort), v)
}

func appendUint(b []byte, v uint32) []byte {
	switch {
	case v == 0:
		return append(b, codeUint0)
	case v < 256:
		return append(b, codeSmallUint, byte(v))
	}
	return binary.BigEndian.AppendUint32(append(b, codeUint), v)
}

func appendUlong(b []byte, v uint64) []byte {
	switch {
	case v == 0:
		return append(b, codeUlong0)
	case v < 256:
		return append(b, codeSmallUlong, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(b, codeUlong), v)
}

func appendInt(b []byte, v int32) []byte {
	if v >= -128 && v <= 127 {
		return append(b, codeSmallInt, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint32(append(b, codeInt), uint32(v))
}

func appendLong(b []byte, v int64) []byte {
	if v >= -128 && v <= 127 {
		return append(b, codeSmallLong, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint64(append(b, codeLong), uint64(v))
}

func appendTimestamp(b []byte, t time.Time) []byte {
	return binary.BigEndian.AppendUint64(append(b, codeTimestamp), uint64(t.UnixMilli()))
}

func appendUUID(b []byte, u UUID) []byte { return append(append(b, codeUUID), u[:]...) }

func appendBinary(b, v []byte) []byte {
	if len(v) < 256 {
		b = append(b, codeVbin8, byte(len(v)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, codeVbin32), uint32(len(v)))
	}
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	if len(v) < 256 {
		b = append(b, codeStr8, byte(len(v)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(len(v)))
	}
	return append(b, v...)
}

func appendSymbol(b []byte, v Symbol) []byte {
	if len(v) < 256 {
		b = append(b, codeSym8, byte(len(v)))
	} else {
		b = binary.BigEndian.AppendUint32(append(b, codeSym32), uint32(len(v)))
	}
	return append(b, v...)
}

// appendDescriptor starts a described value with a numeric descriptor.
func appendDescriptor(b []byte, code uint64) []byte {
	return appendUlong(append(b, codeDescribed), code)
}

// appendSymbols encodes a "multiple" symbol field: nothing is null, one is
// a plain symbol, more are an array.
func appendSymbols(b []byte, v []Symbol) []byte {
	switch len(v) {
	case 0:
		return appendNull(b)
	case 1:
		return appendSymbol(b, v[0])
	}
	return appendValueMust(b, v)
}

// compound helps encode a list or map whose size is known only at its end.
// It reserves a 32-bit header, and end() patches it, shrinking the value to
// the 8-bit form when it fits.
type compound struct {
	start int // offset of the constructor
	count int
}

func beginCompound(b []byte, code byte) ([]byte, compound) {
	c := compound{start: len(b)}
	return append(b, code, 0, 0, 0, 0, 0, 0, 0, 0), c
}

// endList finishes a list. Trailing nulls are dropped, as the spec allows
// for lists that carry fields, so that absent fields cost nothing.
func (c compound) endList(b []byte, trimNulls bool, nonNullEnd int) []byte {
	if trimNulls {
		b = b[:nonNullEnd]
	}
	return c.end(b, codeList0, codeList8, codeList32)
}

func (c compound) endMap(b []byte) []byte {
	return c.end(b, 0, codeMap8, codeMap32)
}

func (c compound) end(b []byte, zero, short, long byte) []byte {
	body := len(b) - c.start - 9
	if c.count == 0 && zero != 0 {
		return append(b[:c.start], zero)
	}
	if body+1 < 256 && c.count < 256 {
		b[c.start] = short
		b[c.start+1] = byte(body + 1)
		b[c.start+2] = byte(c.count)
		copy(b[c.start+3:], b[c.start+9:])
		return b[:len(b)-6]
	}
	b[c.start] = long
	binary.BigEndian.PutUint32(b[c.start+1:], uint32(body+4))
	binary.BigEndian.PutUint32(b[c.start+5:], uint32(c.count))
	return b
}

// fieldList encodes the fields of a performative or other composite type:
// a described list whose trailing absent fields are left out.
type fieldList struct {
	c          compound
	nonNullEnd int
	fields     int
}

func beginFields(b []byte, descriptor uint64) ([]byte, *fieldList) {
	b = appendDescriptor(b, descriptor)
	b, c := beginCompound(b, codeList32)
	return b, &fieldList{c: c, nonNullEnd: len(b)}
}

// field records that one field was appended; null reports whether it was
// absent.
func (f *fieldList) field(b []byte, null bool) {
	f.fields++
	if !null {
		f.c.count = f.fields
		f.nonNullEnd = len(b)
	}
}

func (f *fieldList) end(b []byte) []byte { return f.c.endList(b, true, f.nonNullEnd) }

// appendValueMust is appendValue for values built by the engine itself,
// whose types are known to be encodable.
func appendValueMust(b []byte, v any) []byte {
	b, err := appendValue(b, v)
	if err != nil {
		panic(err)
	}
	return b
}

// appendValue encodes any Go value that has an AMQP form (the mapping of
// the package doc). Plain Go ints encode as long and uints as ulong.
func appendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return appendNull(b), nil
	case bool:
		return appendBool(b, v), nil
	case uint8:
		return appendUbyte(b, v), nil
	case uint16:
		return appendUshort(b, v), nil
	case uint32:
		return appendUint(b, v), nil
	case uint64:
		return appendUlong(b, v), nil
	case uint:
		return appendUlong(b, uint64(v)), nil
	case int8:
		return append(b, codeByte, byte(v)), nil
	case int16:
		return binary.BigEndian.AppendUint16(append(b, codeShort), uint16(v)), nil
	case int32:
		return appendInt(b, v), nil
	case int64:
		return appendLong(b, v), nil
	case int:
		return appendLong(b, int64(v)), nil
	case float32:
		return binary.BigEndian.AppendUint32(append(b, codeFloat), math.Float32bits(v)), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(b, codeDouble), math.Float64bits(v)), nil
	case Decimal32:
		return append(append(b, codeDecimal32), v[:]...), nil
	case Decimal64:
		return append(append(b, codeDecimal64), v[:]...), nil
	case Decimal128:
		return append(append(b, codeDecimal128), v[:]...), nil
	case Char:
		return binary.BigEndian.AppendUint32(append(b, codeChar), uint32(v)), nil
	case time.Time:
		return appendTimestamp(b, v), nil
	case UUID:
		return appendUUID(b, v), nil
	case []byte:
		return appendBinary(b, v), nil
	case string:
		return appendString(b, v), nil
	case Symbol:
		return appendSymbol(b, v), nil
	case Described:
		b = append(b, codeDescribed)
		b, err := appendValue(b, v.Descriptor)
		if err != nil {
			return nil, err
		}
		return appendValue(b, v.Value)
	case []any:
		b, c := beginCompound(b, codeList32)
		for _, e := range v {
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		c.count = len(v)
		return c.endList(b, false, 0), nil
	case Map:
		return appendMap(b, v)
	case map[string]any:
		m := make(Map, 0, len(v))
		for k, e := range v {
			m = append(m, Pair{Key: k, Value: e})
		}
		return appendMap(b, m)
	case map[Symbol]any:
		m := make(Map, 0, len(v))
		for k, e := range v {
			m = append(m, Pair{Key: k, Value: e})
		}
		return appendMap(b, m)
	case Array:
		return appendArray(b, v)
	case []Symbol:
		return appendPrimitiveArray(b, codeSym32, len(v), func(b []byte, i int) []byte { return appendArraySized(b, v[i]) })
	case []string:
		return appendPrimitiveArray(b, codeStr32, len(v), func(b []byte, i int) []byte { return appendArraySized(b, v[i]) })
	case [][]byte:
		return appendPrimitiveArray(b, codeVbin32, len(v), func(b []byte, i int) []byte { return appendArraySized(b, v[i]) })
	case []int64:
		return appendPrimitiveArray(b, codeLong, len(v), func(b []byte, i int) []byte { return binary.BigEndian.AppendUint64(b, uint64(v[i])) })
	case []int32:
		return appendPrimitiveArray(b, codeInt, len(v), func(b []byte, i int) []byte { return binary.BigEndian.AppendUint32(b, uint32(v[i])) })
	case []uint64:
		return appendPrimitiveArray(b, codeUlong, len(v), func(b []byte, i int) []byte { return binary.BigEndian.AppendUint64(b, v[i]) })
	case []uint32:
		return appendPrimitiveArray(b, codeUint, len(v), func(b []byte, i int) []byte { return binary.BigEndian.AppendUint32(b, v[i]) })
	case []float64:
		return appendPrimitiveArray(b, codeDouble, len(v), func(b []byte, i int) []byte { return binary.BigEndian.AppendUint64(b, math.Float64bits(v[i])) })
	case []UUID:
		return appendPrimitiveArray(b, codeUUID, len(v), func(b []byte, i int) []byte { return append(b, v[i][:]...) })
	case []time.Time:
		return appendPrimitiveArray(b, codeTimestamp, len(v), func(b []byte, i int) []byte {
			return binary.BigEndian.AppendUint64(b, uint64(v[i].UnixMilli()))
		})
	}
	return nil, fmt.Errorf("amqp: cannot encode Go type %T", v)
}

func appendMap(b []byte, m Map) ([]byte, error) {
	b, c := beginCompound(b, codeMap32)
	for _, p := range m {
		var err error
		if b, err = appendValue(b, p.Key); err != nil {
			return nil, err
		}
		if b, err = appendValue(b, p.Value); err != nil {
			return nil, err
		}
	}
	c.count = 2 * len(m)
	return c.endMap(b), nil
}

func appendArraySized[T ~string | ~[]byte](b []byte, v T) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(v))), v...)
}

// appendPrimitiveArray encodes an array32 of elements that share one
// constructor. Variable-width elements always use their 32-bit size form,
// which keeps the encoder simple; decoders accept either.
func appendPrimitiveArray(b []byte, elem byte, n int, each func([]byte, int) []byte) ([]byte, error) {
	start := len(b)
	b = append(b, codeArray32, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = append(b, elem)
	for i := range n {
		b = each(b, i)
	}
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-5))
	return b, nil
}

// appendArray encodes a generic Array: every element must encode with the
// array's constructor.
func appendArray(b []byte, a Array) ([]byte, error) {
	start := len(b)
	b = append(b, codeArray32, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(a.Elems)))
	if a.Descriptor != nil {
		b = append(b, codeDescribed)
		var err error
		if b, err = appendValue(b, a.Descriptor); err != nil {
			return nil, err
		}
	}
	elem := wideConstructor(a.Constructor)
	b = append(b, elem)
	var scratch []byte
	for _, e := range a.Elems {
		if d, ok := e.(Described); ok && a.Descriptor != nil {
			e = d.Value
		}
		var err error
		scratch, err = appendValue(scratch[:0], e)
		if err != nil {
			return nil, err
		}
		body, err := reencodeAs(scratch, elem)
		if err != nil {
			return nil, err
		}
		b = append(b, body...)
	}
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-5))
	return b, nil
}

// wideConstructor returns the element constructor appendArray writes for
// the constructor an Array carries: compact forms that not every element
// value fits (uint0, smalluint, list8, str8 ...) are widened to the full
// form of the same type, which every value of that type fits.
func wideConstructor(code byte) byte {
	switch code {
	case codeTrue, codeFalse:
		return codeBool
	case codeUint0, codeSmallUint:
		return codeUint
	case codeUlong0, codeSmallUlong:
		return codeUlong
	case codeSmallInt:
		return codeInt
	case codeSmallLong:
		return codeLong
	case codeVbin8:
		return codeVbin32
	case codeStr8:
		return codeStr32
	case codeSym8:
		return codeSym32
	case codeList0, codeList8:
		return codeList32
	case codeMap8:
		return codeMap32
	case codeArray8:
		return codeArray32
	}
	return code
}

// reencodeAs converts one encoded value (constructor plus data) into the
// data of an array element with constructor want.
func reencodeAs(enc []byte, want byte) ([]byte, error) {
	got := enc[0]
	if got == want {
		return enc[1:], nil
	}
	d := decoder{b: enc}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	var out []byte
	switch want {
	case codeList32, codeMap32, codeVbin32, codeStr32, codeSym32:
		// Widen the 8-bit size (and count) forms.
		switch got {
		case codeList0:
			return []byte{0, 0, 0, 4, 0, 0, 0, 0}, nil
		case codeList8, codeMap8:
			size, count := int(enc[1]), int(enc[2])
			out = binary.BigEndian.AppendUint32(out, uint32(size+3))
			out = binary.BigEndian.AppendUint32(out, uint32(count))
			return append(out, enc[3:]...), nil
		case codeVbin8, codeStr8, codeSym8:
			out = binary.BigEndian.AppendUint32(out, uint32(enc[1]))
			return append(out, enc[2:]...), nil
		}
	case codeUint:
		if u, ok := v.(uint32); ok {
			return binary.BigEndian.AppendUint32(out, u), nil
		}
	case codeUlong:
		if u, ok := v.(uint64); ok {
			return binary.BigEndian.AppendUint64(out, u), nil
		}
	case codeInt:
		if u, ok := v.(int32); ok {
			return binary.BigEndian.AppendUint32(out, uint32(u)), nil
		}
	case codeLong:
		if u, ok := v.(int64); ok {
			return binary.BigEndian.AppendUint64(out, uint64(u)), nil
		}
	case codeBool:
		if u, ok := v.(bool); ok {
			if u {
				return []byte{1}, nil
			}
			return []byte{0}, nil
		}
	}
	return nil, fmt.Errorf("amqp: array element %T does not fit constructor %s", v, typeName(want))
}
