package frontend

import (
	"strings"
	"sync"
)

// entityShared keeps one T per entity for the links of this front-end
// that work on it, as long as one holds it: the unkeyed sends' cursor
// (unkeyed.go), the receivers' pass rotation (pass.go). Keys are entity
// names, or an entity's and its sub-queue's, case-insensitive.
type entityShared[T any] struct {
	mu      sync.Mutex
	entries map[string]*sharedEntry[T]
}

type sharedEntry[T any] struct {
	v     T
	links int
}

// hold returns key's T, made on first use, for a link that lets go of it
// with release when it ends.
func (s *entityShared[T]) hold(key string) *T {
	key = strings.ToLower(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = make(map[string]*sharedEntry[T])
	}
	e := s.entries[key]
	if e == nil {
		e = &sharedEntry[T]{}
		s.entries[key] = e
	}
	e.links++
	return &e.v
}

// release lets go of v, which hold returned for key: the last link to let
// go drops it.
func (s *entityShared[T]) release(key string, v *T) {
	key = strings.ToLower(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil && &e.v == v {
		if e.links--; e.links == 0 {
			delete(s.entries, key)
		}
	}
}
