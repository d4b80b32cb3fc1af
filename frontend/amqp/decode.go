package amqp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// errDecode is wrapped by every decoding failure, so that the engine can
// answer it with amqp:decode-error.
var errDecode = errors.New("amqp: decode error")

func decodeErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errDecode}, args...)...)
}

// maxNesting bounds how deep lists, maps, arrays and described values may
// nest, so that a hostile peer cannot exhaust the stack.
const maxNesting = 64

// decoder reads AMQP encoded values from a byte slice. It never allocates in
// proportion to a length the peer claims: every claimed size or count is
// checked against the bytes actually present first.
type decoder struct {
	b     []byte
	off   int
	depth int
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) need(n int) error {
	if n < 0 || d.remaining() < n {
		return decodeErrorf("need %d bytes at offset %d, have %d", n, d.off, d.remaining())
	}
	return nil
}

func (d *decoder) byte() (byte, error) {
	if d.off >= len(d.b) {
		return 0, decodeErrorf("unexpected end of data at offset %d", d.off)
	}
	c := d.b[d.off]
	d.off++
	return c, nil
}

func (d *decoder) peek() (byte, error) {
	if d.off >= len(d.b) {
		return 0, decodeErrorf("unexpected end of data at offset %d", d.off)
	}
	return d.b[d.off], nil
}

func (d *decoder) bytes(n int) ([]byte, error) {
	if err := d.need(n); err != nil {
		return nil, err
	}
	s := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return s, nil
}

func (d *decoder) u16() (uint16, error) {
	s, err := d.bytes(2)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(s), nil
}

func (d *decoder) u32() (uint32, error) {
	s, err := d.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(s), nil
}

func (d *decoder) u64() (uint64, error) {
	s, err := d.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(s), nil
}

// fixedWidth returns the width of the data that follows a fixed-width
// constructor, or -1 when code is variable-width or compound.
func fixedWidth(code byte) int {
	switch code & 0xf0 {
	case 0x40:
		return 0
	case 0x50:
		return 1
	case 0x60:
		return 2
	case 0x70:
		return 4
	case 0x80:
		return 8
	case 0x90:
		return 16
	}
	return -1
}

// sizeAndCount reads the size (and, for compound types, count) that follows
// a variable-width constructor. width is 1 or 4. The returned end offset is
// checked against the data present.
func (d *decoder) size(width int) (int, error) {
	var n uint32
	if width == 1 {
		c, err := d.byte()
		if err != nil {
			return 0, err
		}
		n = uint32(c)
	} else {
		v, err := d.u32()
		if err != nil {
			return 0, err
		}
		n = v
	}
	if uint64(n) > uint64(d.remaining()) {
		return 0, decodeErrorf("size %d exceeds the %d bytes present", n, d.remaining())
	}
	return int(n), nil
}

// compoundHeader reads the size and count of a list or map whose
// constructor code has already been consumed. It returns the count and the
// offset where the compound value ends.
func (d *decoder) compoundHeader(code byte) (count, end int, err error) {
	switch code {
	case codeList0:
		return 0, d.off, nil
	case codeList8, codeMap8:
		size, err := d.size(1)
		if err != nil {
			return 0, 0, err
		}
		if size < 1 {
			return 0, 0, decodeErrorf("compound size %d too small", size)
		}
		end = d.off + size
		c, _ := d.byte()
		count = int(c)
	case codeList32, codeMap32:
		size, err := d.size(4)
		if err != nil {
			return 0, 0, err
		}
		if size < 4 {
			return 0, 0, decodeErrorf("compound size %d too small", size)
		}
		end = d.off + size
		c, _ := d.u32()
		if uint64(c) > uint64(end-d.off) {
			return 0, 0, decodeErrorf("count %d exceeds the %d bytes of the compound", c, end-d.off)
		}
		count = int(c)
	default:
		return 0, 0, decodeErrorf("expected list or map, got %s", typeName(code))
	}
	// Every element takes at least one byte (its constructor).
	if count > end-d.off {
		return 0, 0, decodeErrorf("count %d exceeds the %d bytes of the compound", count, end-d.off)
	}
	return count, end, nil
}

// skip consumes one whole encoded value without decoding it. It walks
// into lists, maps and arrays, with the nesting bound value has, so that a
// value a broker stores undecoded (an application-properties section, a
// body) is as well-formed as one it decodes; it does not check what lies
// inside strings, booleans and chars.
func (d *decoder) skip() error {
	code, err := d.byte()
	if err != nil {
		return err
	}
	return d.skipAfter(code)
}

func (d *decoder) skipAfter(code byte) error {
	if code == codeDescribed {
		if d.depth >= maxNesting {
			return decodeErrorf("values nested deeper than %d", maxNesting)
		}
		d.depth++
		defer func() { d.depth-- }()
		if err := d.skip(); err != nil {
			return err
		}
		return d.skip()
	}
	switch code {
	case codeList0, codeList8, codeList32, codeMap8, codeMap32:
		return d.skipCompound(code) // list0 counts as a level, as in value
	case codeArray8, codeArray32:
		return d.skipArray(code)
	}
	if w := fixedWidth(code); w >= 0 {
		if !validFixedCode(code) {
			return decodeErrorf("invalid format code 0x%02x", code)
		}
		return d.need2(w)
	}
	var n int
	var err error
	switch code & 0xf0 {
	case 0xa0, 0xc0, 0xe0:
		n, err = d.size(1)
	case 0xb0, 0xd0, 0xf0:
		n, err = d.size(4)
	default:
		return decodeErrorf("invalid format code 0x%02x", code)
	}
	if err != nil {
		return err
	}
	if !validVariableCode(code) {
		return decodeErrorf("invalid format code 0x%02x", code)
	}
	d.off += n
	return nil
}

// skipCompound skips a list or map whose constructor has been consumed,
// element by element.
func (d *decoder) skipCompound(code byte) error {
	count, end, err := d.compoundHeader(code)
	if err != nil {
		return err
	}
	if (code == codeMap8 || code == codeMap32) && count%2 != 0 {
		return decodeErrorf("map with odd element count %d", count)
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer func() { d.depth-- }()
	for range count {
		if err := d.skip(); err != nil {
			return err
		}
		if d.off > end {
			return decodeErrorf("compound elements overrun its size")
		}
	}
	if d.off != end {
		return decodeErrorf("compound of %d elements does not fill its size", count)
	}
	return nil
}

// skipArray skips an array whose constructor has been consumed: its
// element constructor (described or not), then each element.
func (d *decoder) skipArray(code byte) error {
	var size int
	var count uint32
	var err error
	if code == codeArray8 {
		if size, err = d.size(1); err == nil && size < 2 {
			err = decodeErrorf("array size %d too small", size)
		}
		if err != nil {
			return err
		}
		c, _ := d.byte()
		count = uint32(c)
	} else {
		if size, err = d.size(4); err == nil && size < 5 {
			err = decodeErrorf("array size %d too small", size)
		}
		if err != nil {
			return err
		}
		count, _ = d.u32()
	}
	end := d.off + size - 1
	if code == codeArray32 {
		end = d.off + size - 4
	}
	if uint64(count) > uint64(size) {
		return decodeErrorf("array count %d exceeds its size %d", count, size)
	}
	if err := d.enter(); err != nil {
		return err
	}
	defer func() { d.depth-- }()
	elem, err := d.byte()
	if err != nil {
		return err
	}
	if elem == codeDescribed {
		if err := d.skip(); err != nil { // the descriptor
			return err
		}
		if elem, err = d.byte(); err != nil {
			return err
		}
		if elem == codeDescribed {
			return decodeErrorf("array element constructor is doubly described")
		}
	}
	for range count {
		if err := d.skipAfter(elem); err != nil {
			return err
		}
		if d.off > end {
			return decodeErrorf("array elements overrun its size")
		}
	}
	if d.off != end {
		return decodeErrorf("array of %d elements does not fill its size", count)
	}
	return nil
}

func (d *decoder) need2(n int) error {
	if err := d.need(n); err != nil {
		return err
	}
	d.off += n
	return nil
}

func validFixedCode(code byte) bool {
	switch code {
	case codeNull, codeTrue, codeFalse, codeUint0, codeUlong0, codeList0,
		codeUbyte, codeByte, codeSmallUint, codeSmallUlong, codeSmallInt, codeSmallLong, codeBool,
		codeUshort, codeShort,
		codeUint, codeInt, codeFloat, codeChar, codeDecimal32,
		codeUlong, codeLong, codeDouble, codeTimestamp, codeDecimal64,
		codeDecimal128, codeUUID:
		return true
	}
	return false
}

func validVariableCode(code byte) bool {
	switch code {
	case codeVbin8, codeStr8, codeSym8, codeVbin32, codeStr32, codeSym32,
		codeList8, codeMap8, codeList32, codeMap32, codeArray8, codeArray32:
		return true
	}
	return false
}

// isNull consumes a null if one is next and reports whether it did.
func (d *decoder) isNull() bool {
	if d.off < len(d.b) && d.b[d.off] == codeNull {
		d.off++
		return true
	}
	return false
}

// Typed readers. Each accepts the encodings of its type (and narrower
// encodings of the same signedness, which some peers send) and refuses the
// others with a decode error.

func (d *decoder) readUlong() (uint64, error) {
	code, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch code {
	case codeUlong0, codeUint0:
		return 0, nil
	case codeSmallUlong, codeSmallUint, codeUbyte:
		c, err := d.byte()
		return uint64(c), err
	case codeUshort:
		v, err := d.u16()
		return uint64(v), err
	case codeUint:
		v, err := d.u32()
		return uint64(v), err
	case codeUlong:
		return d.u64()
	}
	return 0, decodeErrorf("expected ulong, got %s", typeName(code))
}

func (d *decoder) readUint() (uint32, error) {
	code, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch code {
	case codeUint0:
		return 0, nil
	case codeSmallUint, codeUbyte:
		c, err := d.byte()
		return uint32(c), err
	case codeUshort:
		v, err := d.u16()
		return uint32(v), err
	case codeUint:
		return d.u32()
	}
	return 0, decodeErrorf("expected uint, got %s", typeName(code))
}

func (d *decoder) readUshort() (uint16, error) {
	code, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch code {
	case codeUbyte:
		c, err := d.byte()
		return uint16(c), err
	case codeUshort:
		return d.u16()
	}
	return 0, decodeErrorf("expected ushort, got %s", typeName(code))
}

func (d *decoder) readUbyte() (uint8, error) {
	code, err := d.byte()
	if err != nil {
		return 0, err
	}
	if code != codeUbyte {
		return 0, decodeErrorf("expected ubyte, got %s", typeName(code))
	}
	return d.byte()
}

func (d *decoder) readBool() (bool, error) {
	code, err := d.byte()
	if err != nil {
		return false, err
	}
	switch code {
	case codeTrue:
		return true, nil
	case codeFalse:
		return false, nil
	case codeBool:
		c, err := d.byte()
		if err == nil && c > 1 {
			return false, decodeErrorf("boolean byte 0x%02x", c)
		}
		return c == 1, err
	}
	return false, decodeErrorf("expected boolean, got %s", typeName(code))
}

func (d *decoder) readLong() (int64, error) {
	code, err := d.byte()
	if err != nil {
		return 0, err
	}
	switch code {
	case codeSmallLong, codeSmallInt, codeByte:
		c, err := d.byte()
		return int64(int8(c)), err
	case codeShort:
		v, err := d.u16()
		return int64(int16(v)), err
	case codeInt:
		v, err := d.u32()
		return int64(int32(v)), err
	case codeLong:
		v, err := d.u64()
		return int64(v), err
	}
	return 0, decodeErrorf("expected long, got %s", typeName(code))
}

func (d *decoder) readTimestamp() (time.Time, error) {
	code, err := d.byte()
	if err != nil {
		return time.Time{}, err
	}
	if code != codeTimestamp {
		return time.Time{}, decodeErrorf("expected timestamp, got %s", typeName(code))
	}
	v, err := d.u64()
	return timestampFromMillis(int64(v)), err
}

// readBinary returns a slice of the decoder's buffer (no copy).
func (d *decoder) readBinary() ([]byte, error) {
	code, err := d.byte()
	if err != nil {
		return nil, err
	}
	return d.binaryAfter(code)
}

// binaryAfter reads the size and bytes of a binary whose constructor has
// been consumed (or is an array's element constructor).
func (d *decoder) binaryAfter(code byte) ([]byte, error) {
	var n int
	var err error
	switch code {
	case codeVbin8:
		n, err = d.size(1)
	case codeVbin32:
		n, err = d.size(4)
	default:
		return nil, decodeErrorf("expected binary, got %s", typeName(code))
	}
	if err != nil {
		return nil, err
	}
	return d.bytes(n)
}

func (d *decoder) readString() (string, error) {
	code, err := d.byte()
	if err != nil {
		return "", err
	}
	return d.stringAfter(code, codeStr8, codeStr32, "string")
}

func (d *decoder) readSymbol() (Symbol, error) {
	code, err := d.byte()
	if err != nil {
		return "", err
	}
	s, err := d.stringAfter(code, codeSym8, codeSym32, "symbol")
	return Symbol(s), err
}

func (d *decoder) stringAfter(code, short, long byte, what string) (string, error) {
	var n int
	var err error
	switch code {
	case short:
		n, err = d.size(1)
	case long:
		n, err = d.size(4)
	default:
		return "", decodeErrorf("expected %s, got %s", what, typeName(code))
	}
	if err != nil {
		return "", err
	}
	b, err := d.bytes(n)
	if err != nil {
		return "", err
	}
	if code == codeStr8 || code == codeStr32 {
		if !utf8.Valid(b) {
			return "", decodeErrorf("string is not valid UTF-8")
		}
	}
	return string(b), nil
}

// readSymbols reads a "multiple" symbol field: a single symbol or an array
// of symbols (spec 1.6: multiple="true").
func (d *decoder) readSymbols() ([]Symbol, error) {
	code, err := d.peek()
	if err != nil {
		return nil, err
	}
	if code == codeSym8 || code == codeSym32 {
		s, err := d.readSymbol()
		return []Symbol{s}, err
	}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil:
		return nil, nil
	case []Symbol:
		return v, nil
	}
	return nil, decodeErrorf("expected symbol or array of symbols, got %T", v)
}

// readMap reads a map (or null) into a Map.
func (d *decoder) readMap() (Map, error) {
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case nil:
		return nil, nil
	case Map:
		return v, nil
	}
	return nil, decodeErrorf("expected map, got %T", v)
}

// descriptor reads the descriptor of a described value (after 0x00) and
// returns it as a numeric code; symbolic descriptors of the spec's own types
// are translated to their codes.
func (d *decoder) descriptor() (uint64, error) {
	code, err := d.peek()
	if err != nil {
		return 0, err
	}
	if code == codeSym8 || code == codeSym32 {
		s, err := d.readSymbol()
		if err != nil {
			return 0, err
		}
		if c, ok := symbolicDescriptors[s]; ok {
			return c, nil
		}
		return 0, decodeErrorf("unknown descriptor %q", s)
	}
	return d.readUlong()
}
