package frontend

import "testing"

// TestEntitySharedHeldByLinks: the links of an entity share one value,
// under any case of its name, which is gone when the last one lets go.
func TestEntitySharedHeldByLinks(t *testing.T) {
	var s entityShared[unkeyedCursor]
	a, b := s.hold("Orders"), s.hold("orders")
	if a != b {
		t.Fatal("two links of one entity got different values")
	}
	if s.hold("other") == a {
		t.Fatal("two entities share a value")
	}
	s.release("orders", a)
	if s.hold("ORDERS") != a {
		t.Fatal("the value was dropped while a link held it")
	}
	s.release("orders", a)
	s.release("Orders", b)
	if len(s.entries) != 1 {
		t.Fatalf("%d values kept, want only other's", len(s.entries))
	}
	c := s.hold("orders")
	if c == a {
		t.Fatal("a value dropped came back")
	}
	s.release("orders", a) // a link of the dropped one ends late
	if s.hold("orders") != c {
		t.Fatal("a late release dropped the new value")
	}
}
