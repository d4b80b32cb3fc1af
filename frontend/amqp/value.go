package amqp

import (
	"errors"
	"math"
	"time"
	"unicode/utf8"
)

// Generic decoding: any encoded value into its Go form (see the package
// doc for the mapping). The typed readers in decode.go serve the
// performatives' known fields; this serves maps, lists, annotations and
// bodies, whose contents the peer chooses.

// value decodes any one value into its Go form (see the package doc for
// the mapping).
func (d *decoder) value() (any, error) {
	code, err := d.byte()
	if err != nil {
		return nil, err
	}
	return d.valueAfter(code)
}

func (d *decoder) valueAfter(code byte) (any, error) {
	switch code {
	case codeDescribed:
		if d.depth >= maxNesting {
			return nil, decodeErrorf("values nested deeper than %d", maxNesting)
		}
		d.depth++
		defer func() { d.depth-- }()
		desc, err := d.value()
		if err != nil {
			return nil, err
		}
		switch desc.(type) {
		case uint64, Symbol:
		default:
			return nil, decodeErrorf("descriptor must be ulong or symbol, got %T", desc)
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		return Described{Descriptor: desc, Value: v}, nil
	case codeNull:
		return nil, nil
	case codeTrue:
		return true, nil
	case codeFalse:
		return false, nil
	case codeBool:
		c, err := d.byte()
		if err == nil && c > 1 {
			return nil, decodeErrorf("boolean byte 0x%02x", c)
		}
		return c == 1, err
	case codeUbyte:
		c, err := d.byte()
		return c, err
	case codeUshort:
		return d.u16()
	case codeUint0:
		return uint32(0), nil
	case codeSmallUint:
		c, err := d.byte()
		return uint32(c), err
	case codeUint:
		return d.u32()
	case codeUlong0:
		return uint64(0), nil
	case codeSmallUlong:
		c, err := d.byte()
		return uint64(c), err
	case codeUlong:
		return d.u64()
	case codeByte:
		c, err := d.byte()
		return int8(c), err
	case codeShort:
		v, err := d.u16()
		return int16(v), err
	case codeSmallInt:
		c, err := d.byte()
		return int32(int8(c)), err
	case codeInt:
		v, err := d.u32()
		return int32(v), err
	case codeSmallLong:
		c, err := d.byte()
		return int64(int8(c)), err
	case codeLong:
		v, err := d.u64()
		return int64(v), err
	case codeFloat:
		v, err := d.u32()
		return math.Float32frombits(v), err
	case codeDouble:
		v, err := d.u64()
		return math.Float64frombits(v), err
	case codeDecimal32:
		var v Decimal32
		s, err := d.bytes(4)
		copy(v[:], s)
		return v, err
	case codeDecimal64:
		var v Decimal64
		s, err := d.bytes(8)
		copy(v[:], s)
		return v, err
	case codeDecimal128:
		var v Decimal128
		s, err := d.bytes(16)
		copy(v[:], s)
		return v, err
	case codeChar:
		v, err := d.u32()
		if err == nil && (v > utf8.MaxRune) {
			return nil, decodeErrorf("char 0x%x out of range", v)
		}
		return Char(v), err
	case codeTimestamp:
		v, err := d.u64()
		return timestampFromMillis(int64(v)), err
	case codeUUID:
		var v UUID
		s, err := d.bytes(16)
		copy(v[:], s)
		return v, err
	case codeVbin8, codeVbin32:
		b, err := d.binaryAfter(code)
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), b...), nil
	case codeStr8, codeStr32:
		return d.stringAfter(code, codeStr8, codeStr32, "string")
	case codeSym8, codeSym32:
		s, err := d.stringAfter(code, codeSym8, codeSym32, "symbol")
		return Symbol(s), err
	case codeList0, codeList8, codeList32:
		return d.listAfter(code)
	case codeMap8, codeMap32:
		return d.mapAfter(code)
	case codeArray8, codeArray32:
		return d.arrayAfter(code)
	}
	return nil, decodeErrorf("invalid format code 0x%02x", code)
}

func (d *decoder) enter() error {
	if d.depth >= maxNesting {
		return decodeErrorf("values nested deeper than %d", maxNesting)
	}
	d.depth++
	return nil
}

func (d *decoder) listAfter(code byte) ([]any, error) {
	count, end, err := d.compoundHeader(code)
	if err != nil {
		return nil, err
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	list := make([]any, 0, count)
	for range count {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		list = append(list, v)
	}
	if d.off != end {
		return nil, decodeErrorf("list of %d elements does not fill its size", count)
	}
	return list, nil
}

func (d *decoder) mapAfter(code byte) (Map, error) {
	count, end, err := d.compoundHeader(code)
	if err != nil {
		return nil, err
	}
	if count%2 != 0 {
		return nil, decodeErrorf("map with odd element count %d", count)
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	m := make(Map, 0, count/2)
	for range count / 2 {
		k, err := d.value()
		if err != nil {
			return nil, err
		}
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m = append(m, Pair{Key: k, Value: v})
	}
	if d.off != end {
		return nil, decodeErrorf("map of %d elements does not fill its size", count)
	}
	return m, nil
}

// arrayAfter decodes an array. Arrays of the common primitive types become
// typed slices ([]Symbol, []string, []int64 ...); all others an Array.
func (d *decoder) arrayAfter(code byte) (any, error) {
	var size int
	var count uint32
	var err error
	if code == codeArray8 {
		size, err = d.size(1)
		if err == nil && size < 2 {
			err = decodeErrorf("array size %d too small", size)
		}
		if err != nil {
			return nil, err
		}
		c, _ := d.byte()
		count = uint32(c)
	} else {
		size, err = d.size(4)
		if err == nil && size < 5 {
			err = decodeErrorf("array size %d too small", size)
		}
		if err != nil {
			return nil, err
		}
		count, _ = d.u32()
	}
	end := d.off + size - 1 // size counts the count field too
	if code == codeArray32 {
		end = d.off + size - 4
	}
	// Elements of zero-width types (null, true, uint0 ...) take no bytes,
	// so the count is bounded by the array's byte size instead: nothing a
	// peer claims makes us allocate more than it sent.
	if uint64(count) > uint64(size) {
		return nil, decodeErrorf("array count %d exceeds its size %d", count, size)
	}
	if err := d.enter(); err != nil {
		return nil, err
	}
	defer func() { d.depth-- }()
	var descriptor any
	elem, err := d.byte()
	if err != nil {
		return nil, err
	}
	if elem == codeDescribed {
		descriptor, err = d.value()
		if err != nil {
			return nil, err
		}
		if elem, err = d.byte(); err != nil {
			return nil, err
		}
	}
	if elem == codeDescribed {
		return nil, decodeErrorf("array element constructor is doubly described")
	}
	n := int(count)
	var out any
	if descriptor == nil {
		out, err = d.typedArray(elem, n)
	} else {
		err = errUntyped
	}
	if err == errUntyped {
		arr := Array{Descriptor: descriptor, Constructor: elem, Elems: make([]any, 0, n)}
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			if descriptor != nil {
				v = Described{Descriptor: descriptor, Value: v}
			}
			arr.Elems = append(arr.Elems, v)
		}
		out, err = arr, nil
	}
	if err != nil {
		return nil, err
	}
	if d.off != end {
		return nil, decodeErrorf("array of %d elements does not fill its size", n)
	}
	return out, nil
}

var errUntyped = errors.New("untyped array")

func (d *decoder) typedArray(elem byte, n int) (any, error) {
	switch elem {
	case codeSym8, codeSym32:
		out := make([]Symbol, 0, n)
		for range n {
			s, err := d.stringAfter(elem, codeSym8, codeSym32, "symbol")
			if err != nil {
				return nil, err
			}
			out = append(out, Symbol(s))
		}
		return out, nil
	case codeStr8, codeStr32:
		out := make([]string, 0, n)
		for range n {
			s, err := d.stringAfter(elem, codeStr8, codeStr32, "string")
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	case codeLong, codeSmallLong:
		out := make([]int64, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(int64))
		}
		return out, nil
	case codeInt, codeSmallInt:
		out := make([]int32, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(int32))
		}
		return out, nil
	case codeUlong, codeSmallUlong, codeUlong0:
		out := make([]uint64, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(uint64))
		}
		return out, nil
	case codeUint, codeSmallUint, codeUint0:
		out := make([]uint32, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(uint32))
		}
		return out, nil
	case codeUUID:
		out := make([]UUID, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(UUID))
		}
		return out, nil
	case codeTimestamp:
		out := make([]time.Time, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(time.Time))
		}
		return out, nil
	case codeVbin8, codeVbin32:
		out := make([][]byte, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.([]byte))
		}
		return out, nil
	case codeDouble:
		out := make([]float64, 0, n)
		for range n {
			v, err := d.valueAfter(elem)
			if err != nil {
				return nil, err
			}
			out = append(out, v.(float64))
		}
		return out, nil
	}
	return nil, errUntyped
}

// symbolicDescriptors maps the symbolic names of the spec's described
// types to their numeric codes, so that both forms decode alike.
var symbolicDescriptors = map[Symbol]uint64{
	"amqp:open:list":                           descOpen,
	"amqp:begin:list":                          descBegin,
	"amqp:attach:list":                         descAttach,
	"amqp:flow:list":                           descFlow,
	"amqp:transfer:list":                       descTransfer,
	"amqp:disposition:list":                    descDisposition,
	"amqp:detach:list":                         descDetach,
	"amqp:end:list":                            descEnd,
	"amqp:close:list":                          descClose,
	"amqp:error:list":                          descError,
	"amqp:received:list":                       descReceived,
	"amqp:accepted:list":                       descAccepted,
	"amqp:rejected:list":                       descRejected,
	"amqp:released:list":                       descReleased,
	"amqp:modified:list":                       descModified,
	"amqp:source:list":                         descSource,
	"amqp:target:list":                         descTarget,
	"amqp:delete-on-close:list":                0x2b,
	"amqp:delete-on-no-links:list":             0x2c,
	"amqp:delete-on-no-messages:list":          0x2d,
	"amqp:delete-on-no-links-or-messages:list": 0x2e,
	"amqp:header:list":                         SectionHeader,
	"amqp:delivery-annotations:map":            SectionDeliveryAnnotations,
	"amqp:message-annotations:map":             SectionMessageAnnotations,
	"amqp:properties:list":                     SectionProperties,
	"amqp:application-properties:map":          SectionApplicationProperties,
	"amqp:data:binary":                         SectionData,
	"amqp:amqp-sequence:list":                  SectionAMQPSequence,
	"amqp:amqp-value:*":                        SectionAMQPValue,
	"amqp:footer:map":                          SectionFooter,
	"amqp:sasl-mechanisms:list":                descSASLMechanisms,
	"amqp:sasl-init:list":                      descSASLInit,
	"amqp:sasl-challenge:list":                 descSASLChallenge,
	"amqp:sasl-response:list":                  descSASLResponse,
	"amqp:sasl-outcome:list":                   descSASLOutcome,
	"amqp:coordinator:list":                    0x30,
	"amqp:declare:list":                        0x31,
	"amqp:discharge:list":                      0x32,
	"amqp:declared:list":                       0x33,
	"amqp:transactional-state:list":            0x34,
}
