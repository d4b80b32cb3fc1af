package partition

// ForwardEntries counts an entity partition's forwarded origins: the
// records and those by time, which must agree.
func ForwardEntries(m *Machine, id uint64, part uint32) (int, error) {
	k := ekey{id, part}
	return countPaired(m, kindPrefix(k, kindForward), kindPrefix(k, kindForwardTime))
}

// TopicScheduledEntries counts a topic partition's records of scheduled
// messages: the records and those by time, which must agree.
func TopicScheduledEntries(m *Machine, id uint64, part uint32) (int, error) {
	k := ekey{id, part}
	return countPaired(m, kindPrefix(k, kindTopicSched), kindPrefix(k, kindTopicSchedTime))
}
