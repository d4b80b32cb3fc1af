package amqp

import "time"

// fields walks the positional fields of a described list (a performative,
// a source, an error ...). Errors are sticky: after the first one every
// accessor is a no-op and done() reports it, which keeps the decoders of
// the many composite types short.
type fields struct {
	d    *decoder
	left int
	end  int
	err  error
}

// openFields reads the list header of a composite's fields. The descriptor
// has already been consumed.
func (d *decoder) openFields() fields {
	code, err := d.byte()
	if err != nil {
		return fields{d: d, err: err}
	}
	count, end, err := d.compoundHeader(code)
	if err == nil && (code == codeMap8 || code == codeMap32) {
		err = decodeErrorf("expected a list of fields, got a map")
	}
	return fields{d: d, left: count, end: end, err: err}
}

// next reports whether the next field is present (not null and not beyond
// the end of the list) and consumes its null if it is absent.
func (f *fields) next() bool {
	if f.err != nil || f.left == 0 {
		return false
	}
	f.left--
	if f.d.off >= f.end {
		f.err = decodeErrorf("field beyond the end of its list")
		return false
	}
	return !f.d.isNull()
}

func (f *fields) fail(err error) {
	if f.err == nil && err != nil {
		f.err = err
	}
}

// required records an error when a mandatory field was absent.
func (f *fields) required(present bool, name string) {
	if !present && f.err == nil {
		f.err = decodeErrorf("mandatory field %s is absent", name)
	}
}

func (f *fields) str(dst *string) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readString()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) sym(dst *Symbol) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readSymbol()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) u64(dst *uint64) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readUlong()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) u32(dst *uint32) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readUint()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) u16(dst *uint16) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readUshort()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) u8(dst *uint8) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readUbyte()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) boolean(dst *bool) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readBool()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) timestamp(dst *time.Time) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readTimestamp()
	f.fail(err)
	*dst = v
	return err == nil
}

// binary keeps a slice of the decoder's buffer: callers that retain it
// beyond the frame must copy.
func (f *fields) binary(dst *[]byte) bool {
	if !f.next() {
		return false
	}
	v, err := f.d.readBinary()
	f.fail(err)
	*dst = v
	return err == nil
}

func (f *fields) symbols(dst *[]Symbol) {
	if !f.next() {
		return
	}
	v, err := f.d.readSymbols()
	f.fail(err)
	*dst = v
}

func (f *fields) mapField(dst *Map) {
	if !f.next() {
		return
	}
	v, err := f.d.readMap()
	f.fail(err)
	*dst = v
}

func (f *fields) value(dst *any) {
	if !f.next() {
		return
	}
	v, err := f.d.value()
	f.fail(err)
	*dst = v
}

func (f *fields) errorField(dst **Error) {
	if !f.next() {
		return
	}
	e, err := decodeError(f.d)
	f.fail(err)
	*dst = e
}

func (f *fields) state(dst *DeliveryState) {
	if !f.next() {
		return
	}
	s, err := decodeState(f.d)
	f.fail(err)
	*dst = s
}

// done skips fields this version of the spec does not define (a newer
// peer may send more) and checks that the list was consumed exactly.
func (f *fields) done() error {
	for f.err == nil && f.left > 0 {
		f.left--
		f.fail(f.d.skip())
	}
	if f.err == nil && f.d.off != f.end {
		f.err = decodeErrorf("composite fields do not fill their list")
	}
	return f.err
}

// expectDescribed consumes the 0x00 and descriptor of a composite and
// checks it is the one wanted.
func (d *decoder) expectDescribed(want uint64, name string) error {
	c, err := d.byte()
	if err != nil {
		return err
	}
	if c != codeDescribed {
		return decodeErrorf("expected %s, got %s", name, typeName(c))
	}
	got, err := d.descriptor()
	if err != nil {
		return err
	}
	if got != want {
		return decodeErrorf("expected %s (0x%x), got descriptor 0x%x", name, want, got)
	}
	return nil
}
