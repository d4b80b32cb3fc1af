package filter

import (
	"bytes"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// kind is the type of a value during evaluation.
type kind uint8

const (
	kindNull kind = iota // null or unknown
	kindBool
	kindInt // every integer type
	kindFloat
	kindString
	kindTimestamp
	kindDuration
	kindUUID
	kindBinary
	kindOther // a property of a type the language cannot read
)

func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindInt:
		return "an integer"
	case kindFloat:
		return "a float"
	case kindString:
		return "a string"
	case kindTimestamp:
		return "a timestamp"
	case kindDuration:
		return "a duration"
	case kindUUID:
		return "a uuid"
	case kindBinary:
		return "a binary"
	}
	return "a value of an unsupported type"
}

// value is one evaluated operand. It is passed by value so that evaluation
// allocates nothing for scalars.
type value struct {
	kind kind
	i    int64 // kindBool (0 or 1), kindInt, kindTimestamp, kindDuration
	f    float64
	s    string
	// x holds a UUID (kindUUID), a []byte (kindBinary) or the property as
	// it was (kindOther), in the interface the message already had, so
	// reading one allocates nothing.
	x any
}

func boolValue(b bool) value {
	if b {
		return value{kind: kindBool, i: 1}
	}
	return value{kind: kindBool}
}

func intValue(i int64) value     { return value{kind: kindInt, i: i} }
func floatValue(f float64) value { return value{kind: kindFloat, f: f} }
func stringValue(s string) value { return value{kind: kindString, s: s} }

func optString(s string) value {
	if s == "" {
		return value{}
	}
	return stringValue(s)
}

func optTimestamp(t Timestamp) value {
	if t == 0 {
		return value{}
	}
	return value{kind: kindTimestamp, i: int64(t)}
}

func (v value) isNull() bool { return v.kind == kindNull }
func (v value) isTrue() bool { return v.kind == kindBool && v.i != 0 }
func (v value) isNumber() bool {
	return v.kind == kindInt || v.kind == kindFloat
}

func (v value) float() float64 {
	if v.kind == kindInt {
		return float64(v.i)
	}
	return v.f
}

// fromAny converts an application property to a value.
func fromAny(orig any) value {
	switch x := orig.(type) {
	case nil:
		return value{}
	case string:
		return stringValue(x)
	case bool:
		return boolValue(x)
	case int:
		return intValue(int64(x))
	case int8:
		return intValue(int64(x))
	case int16:
		return intValue(int64(x))
	case int32:
		return intValue(int64(x))
	case int64:
		return intValue(x)
	case uint:
		return fromUint(uint64(x))
	case uint8:
		return intValue(int64(x))
	case uint16:
		return intValue(int64(x))
	case uint32:
		return intValue(int64(x))
	case uint64:
		return fromUint(x)
	case float32:
		return floatValue(float64(x))
	case float64:
		return floatValue(x)
	case Timestamp:
		return value{kind: kindTimestamp, i: int64(x)}
	case Duration:
		return value{kind: kindDuration, i: int64(x)}
	case UUID:
		return value{kind: kindUUID, x: orig}
	case []byte:
		return value{kind: kindBinary, x: orig}
	}
	return fromNamed(orig)
}

// fromNamed reads a value of a named type over a string, bool or number
// (an AMQP symbol type, say) as that kind; anything else is kindOther.
func fromNamed(orig any) value {
	v := reflect.ValueOf(orig)
	switch v.Kind() {
	case reflect.String:
		return stringValue(v.String())
	case reflect.Bool:
		return boolValue(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intValue(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fromUint(v.Uint())
	case reflect.Float32, reflect.Float64:
		return floatValue(v.Float())
	}
	return value{kind: kindOther, x: orig}
}

func fromUint(u uint64) value {
	if u > math.MaxInt64 {
		return floatValue(float64(u))
	}
	return intValue(int64(u))
}

// toAny converts a value to an application property, for SET.
func (v value) toAny() any {
	switch v.kind {
	case kindBool:
		return v.i != 0
	case kindInt:
		return v.i
	case kindFloat:
		return v.f
	case kindString:
		return v.s
	case kindTimestamp:
		return Timestamp(v.i)
	case kindDuration:
		return Duration(v.i)
	case kindUUID, kindBinary, kindOther:
		return v.x
	}
	return nil
}

// compare orders a and b: -1, 0 or 1, and ok false when they cannot be
// compared (a null, or kinds that do not meet). ordered false means only
// equality is defined between them (booleans, uuids, binaries); NaN is
// unordered and unequal to everything, as in C#.
func compare(a, b value) (c int, ordered, ok bool) {
	if a.isNumber() && b.isNumber() {
		if a.kind == kindInt && b.kind == kindInt {
			return cmpInt(a.i, b.i), true, true
		}
		x, y := a.float(), b.float()
		switch {
		case x < y:
			return -1, true, true
		case x > y:
			return 1, true, true
		case x == y:
			return 0, true, true
		}
		return 2, true, true // NaN: neither less, greater nor equal
	}
	if a.kind != b.kind {
		return 0, false, false
	}
	switch a.kind {
	case kindString:
		return strings.Compare(a.s, b.s), true, true
	case kindTimestamp, kindDuration:
		return cmpInt(a.i, b.i), true, true
	case kindBool:
		return cmpInt(a.i, b.i), false, true
	case kindUUID:
		x, y := a.x.(UUID), b.x.(UUID)
		return bytes.Compare(x[:], y[:]), false, true
	case kindBinary:
		return bytes.Compare(a.x.([]byte), b.x.([]byte)), false, true
	}
	return 0, false, false
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// equal is SQL equality: null when either side is null or the kinds do
// not meet.
func equal(a, b value) value {
	c, _, ok := compare(a, b)
	if !ok {
		return value{}
	}
	return boolValue(c == 0)
}

// literal formats a constant so that the parser reads it back as the
// same constant.
func (v value) literal() string {
	switch v.kind {
	case kindNull:
		return "NULL"
	case kindBool:
		if v.i != 0 {
			return "TRUE"
		}
		return "FALSE"
	case kindInt:
		return strconv.FormatInt(v.i, 10)
	case kindFloat:
		s := strconv.FormatFloat(v.f, 'g', -1, 64)
		if !strings.ContainsAny(s, ".eE") {
			s += ".0"
		}
		return strings.ToUpper(s)
	case kindString:
		return quoteString(v.s)
	}
	return "NULL" // other kinds have no literal; the parser never makes them
}

func quoteString(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
