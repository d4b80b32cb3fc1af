package partition

import "github.com/quorumbus/quorumbus/partition/store"

// ekey names an entity partition. The key space is partition/store's
// (store/doc.go).
type ekey = store.EntityKey
