package catalog

import (
	"cmp"
	"slices"
	"strings"

	pb "github.com/quorumbus/quorumbus/proto/placementpb"
)

// nameIndex keeps each kind's entities ordered by Key(name), so that a
// list reads a page (skip, top) or a name range (a topic's
// subscriptions) without sorting the namespace per request, and every
// entity's id in order, so that the routing table (built at every change)
// lists them by id without sorting.
//
// It is derived state: never replicated, never in a snapshot. Every
// change of State.entities updates it in the same apply, and
// FromSnapshot rebuilds it from the entities, so it is a function of the
// entities alone and equal on every replica. Invariant (checkIndex in the
// tests): for each kind, the entries are exactly the entities of that
// kind, in strictly increasing key order; ids are exactly the entities'
// ids, increasing.
//
// A sorted slice rather than a tree: a page is a slice expression, and
// at the namespace's limit (MaxEntities) an insert or delete moves at
// most a few hundred KB.
type nameIndex struct {
	byKind map[pb.EntityKind][]indexEntry
	ids    []uint64
}

type indexEntry struct {
	key string // Key(name)
	id  uint64
}

func newNameIndex() *nameIndex {
	return &nameIndex{byKind: map[pb.EntityKind][]indexEntry{}}
}

func compareEntry(a indexEntry, key string) int { return strings.Compare(a.key, key) }

// add indexes e; its name and id must not be indexed already
// (State.names and nextEntityID guarantee it).
func (x *nameIndex) add(e *pb.Entity) {
	list := x.byKind[e.Kind]
	key := Key(e.Name)
	i, _ := slices.BinarySearchFunc(list, key, compareEntry)
	x.byKind[e.Kind] = slices.Insert(list, i, indexEntry{key: key, id: e.Id})
	j, _ := slices.BinarySearch(x.ids, e.Id) // the end: ids are handed out increasing
	x.ids = slices.Insert(x.ids, j, e.Id)
}

// remove drops e; nothing happens when it is not indexed.
func (x *nameIndex) remove(e *pb.Entity) {
	list := x.byKind[e.Kind]
	if i, ok := slices.BinarySearchFunc(list, Key(e.Name), compareEntry); ok {
		x.byKind[e.Kind] = slices.Delete(list, i, i+1)
	}
	if j, ok := slices.BinarySearch(x.ids, e.Id); ok {
		x.ids = slices.Delete(x.ids, j, j+1)
	}
}

// removePrefix drops every entry of kind whose key starts with prefix:
// one contiguous range, moved once (a topic's subscriptions when it is
// deleted). Their ids stay until remove.
func (x *nameIndex) removePrefix(kind pb.EntityKind, prefix string) {
	list := x.byKind[kind]
	lo, hi := prefixRange(list, prefix)
	x.byKind[kind] = slices.Delete(list, lo, hi)
}

// page returns the entries of kind in key order, skipping the first skip;
// top 0 means no limit. The slice is the index's own: read it before the
// next change.
func (x *nameIndex) page(kind pb.EntityKind, skip, top int) []indexEntry {
	return window(x.byKind[kind], skip, top)
}

// withPrefix returns the entries of kind whose key starts with prefix, in
// key order. The slice is the index's own: read it before the next change.
func (x *nameIndex) withPrefix(kind pb.EntityKind, prefix string) []indexEntry {
	list := x.byKind[kind]
	lo, hi := prefixRange(list, prefix)
	return list[lo:hi]
}

// prefixRange finds the entries whose key starts with prefix: in a sorted
// list they are contiguous, from the first key not below prefix.
func prefixRange(list []indexEntry, prefix string) (lo, hi int) {
	lo, _ = slices.BinarySearchFunc(list, prefix, compareEntry)
	hi = lo
	for hi < len(list) && strings.HasPrefix(list[hi].key, prefix) {
		hi++
	}
	return lo, hi
}

// window cuts skip, then at most top (0: all) out of list.
func window[T any](list []T, skip, top int) []T {
	if skip < 0 || skip >= len(list) {
		return nil
	}
	list = list[skip:]
	if top > 0 && top < len(list) {
		list = list[:top]
	}
	return list
}

// rebuildIndex indexes every entity anew (a restored snapshot).
func (s *State) rebuildIndex() {
	s.index = newNameIndex()
	for _, e := range s.entities {
		s.index.byKind[e.Kind] = append(s.index.byKind[e.Kind], indexEntry{key: Key(e.Name), id: e.Id})
		s.index.ids = append(s.index.ids, e.Id)
	}
	for _, list := range s.index.byKind {
		slices.SortFunc(list, func(a, b indexEntry) int { return cmp.Compare(a.key, b.key) })
	}
	slices.Sort(s.index.ids)
}

// entitiesOf returns the entities of index entries, in their order.
func (s *State) entitiesOf(entries []indexEntry) []*pb.Entity {
	out := make([]*pb.Entity, len(entries))
	for i, ie := range entries {
		out[i] = s.entities[ie.id]
	}
	return out
}
