package rpcbuf

import "testing"

func TestGetPutTiers(t *testing.T) {
	p := new(Pool)
	for _, n := range []int{1, 100, 255, 256, 257, 1000, 4096, 4097, 1 << 20, 1<<20 + 1, 1 << 27, 1<<27 + 1} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d): len %d", n, len(*b))
		}
		if cap(*b) < n {
			t.Fatalf("Get(%d): cap %d", n, cap(*b))
		}
		// Fill it as gRPC would, return it, and take one of the same size.
		for i := range *b {
			(*b)[i] = 0xAA
		}
		p.Put(b)
		c := p.Get(n)
		if len(*c) != n {
			t.Fatalf("Get(%d) after Put: len %d", n, len(*c))
		}
	}
}

func TestTier(t *testing.T) {
	for _, tt := range []struct{ n, want int }{
		{0, -1}, {1, 0}, {256, 0}, {257, 1}, {512, 1}, {513, 2}, {1 << 27, maxShift - minShift}, {1<<27 + 1, -1},
	} {
		if got := tier(tt.n); got != tt.want {
			t.Errorf("tier(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

func TestPutForeignBuffer(t *testing.T) {
	p := new(Pool)
	odd := make([]byte, 300) // not a tier's capacity: dropped
	p.Put(&odd)
	b := p.Get(300)
	if cap(*b) != 512 {
		t.Fatalf("Get(300) returned a foreign buffer of cap %d", cap(*b))
	}
}
