package bitmap

import (
	"crypto/rand"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The stamp of a map: every write of a Store puts the map and a fresh random
// stamp in one transaction (etcdlayout.MapStamp is its key), every read
// reads both at one revision, and every compare-and-swap compares both: the
// map's ModRevision and the stamp's value.
//
// Why the revision is not enough: when etcd is restored from a backup without
// --bump-revision, its revisions count up again from the backup's. A map a
// server cached before the restore (its own write, or one it read, after the
// backup was taken) carries a ModRevision that the restored history can reach
// again with other contents; a compare-and-swap on that revision alone would
// then succeed and write the stale map back: allocations made since the
// restore dropped, lost ones put back, addresses handed out twice. The
// server refuses its own writes after a restore to a point before its
// restore marker last moved, and stops (internal/etcdhistory); a backup taken
// after that, within its last second, leaves nothing the marker can tell,
// and stores that are not the server's (the repair job) have no marker. A stamp written after
// the backup was taken is random and exists in no other history, so the
// compare fails and the store reloads; a stamp from before the backup pairs
// with a map the restored etcd holds too.
//
// Comparing the map's value instead would carry the whole map twice in every
// transaction (a /16 map is 8 KiB); the stamp is 26 bytes, and writing and
// comparing it costs about 6% of the group-committed allocation rate at 32
// callers (BenchmarkEtcdAllocateNext in pkg/bitmap/clusterip).
//
// Writers that do not stamp (kube-apiserver beside us, a previous version of
// this server in a rolling upgrade) leave the stamp as it was; their writes
// change the ModRevision, which the compare still checks, and a stamping
// writer reads the pair again. Only a restore in a fleet where such writers
// alone wrote the map after the backup falls back to the revision compare.

// mapState is the map as one read saw it: its value, its ModRevision (0: the
// key does not exist) and its stamp ("": none).
type mapState struct {
	value []byte
	rev   int64
	stamp string
}

func (s mapState) exists() bool { return s.rev != 0 }

// readOps reads the map and its stamp; stateOf decodes their answers.
func (a *Store) readOps() []clientv3.Op {
	return []clientv3.Op{clientv3.OpGet(a.key), clientv3.OpGet(a.stampKey)}
}

// stateOf returns the map state from the two answers of readOps.
func stateOf(mapResp, stampResp *pb.ResponseOp) mapState {
	var s mapState
	if kvs := mapResp.GetResponseRange().GetKvs(); len(kvs) > 0 {
		s.value, s.rev = kvs[0].Value, kvs[0].ModRevision
	}
	if kvs := stampResp.GetResponseRange().GetKvs(); len(kvs) > 0 {
		s.stamp = string(kvs[0].Value)
	}
	return s
}

// unchanged compares the map and its stamp with s. A map that did not exist
// must still not exist, whatever stamp a deleted map left: creating it
// cannot overwrite anything.
func (a *Store) unchanged(s mapState) []clientv3.Cmp {
	if !s.exists() {
		return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(a.key), "=", 0)}
	}
	stamp := clientv3.Compare(clientv3.Value(a.stampKey), "=", s.stamp)
	if s.stamp == "" {
		// etcd fails every value compare on a missing key.
		stamp = clientv3.Compare(clientv3.Version(a.stampKey), "=", 0)
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(a.key), "=", s.rev), stamp}
}

// putOps writes value as the map, with a fresh stamp, which it returns.
func (a *Store) putOps(value []byte) ([]clientv3.Op, string) {
	stamp := rand.Text()
	return []clientv3.Op{clientv3.OpPut(a.key, string(value)), clientv3.OpPut(a.stampKey, stamp)}, stamp
}
