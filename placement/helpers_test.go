package placement_test

import "github.com/hashicorp/raft"

func raftTransport() (raft.ServerAddress, *raft.InmemTransport) { return raft.NewInmemTransport("") }

func bootstrapOf(ids ...string) []raft.Server {
	var out []raft.Server
	for _, id := range ids {
		out = append(out, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id)})
	}
	return out
}
