package partition

import "github.com/quorumbus/quorumbus/partition/store"

// ForwardEntries counts an entity partition's forwarded origins: the
// records and those by time, which must agree.
func ForwardEntries(m *Machine, id uint64, part uint32) (int, error) {
	k := ekey{ID: id, Part: part}
	return countPaired(m, store.KindPrefix(k, store.KindForward), store.KindPrefix(k, store.KindForwardTime))
}

// TopicScheduledEntries counts a topic partition's records of scheduled
// messages: the records and those by time, which must agree.
func TopicScheduledEntries(m *Machine, id uint64, part uint32) (int, error) {
	k := ekey{ID: id, Part: part}
	return countPaired(m, store.KindPrefix(k, store.KindTopicSched), store.KindPrefix(k, store.KindTopicSchedTime))
}
