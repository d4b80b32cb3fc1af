package history

import (
	"bytes"
	"testing"
)

func TestRecorderStreamsAndStopsAtItsBound(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	r.MaxOps = 3
	for range 5 {
		r.Add(Op{Process: 1, Type: Invoke, F: Send, MsgID: "a"})
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := len(r.Ops()); got != 3 {
		t.Errorf("kept %d entries, want 3", got)
	}
	if got := r.Overflowed(); got != 2 {
		t.Errorf("dropped %d entries, want 2", got)
	}
	if got := bytes.Count(buf.Bytes(), []byte("\n")); got != 3 {
		t.Errorf("streamed %d lines, want 3", got)
	}
}
