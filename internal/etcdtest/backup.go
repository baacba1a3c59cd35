package etcdtest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// The two ways an operator backs etcd up and restores it, for tests of what
// happens to the servers on top.

// ColdBackup stops the member, copies its data directory (a cold backup),
// starts the member again and returns the copy's path. Restored with
// RestoreColdBackup, etcd's revision goes back to the backup's.
func (e *Etcd) ColdBackup(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "etcd-cold-backup")
	e.Stop()
	if err := copyTree(e.DataDir(), dir); err != nil {
		t.Fatalf("etcdtest: cold backup: %v", err)
	}
	e.Restart(t)
	return dir
}

// RestoreColdBackup stops the member, replaces its data directory with a
// copy of backup (from ColdBackup) and starts it again.
func (e *Etcd) RestoreColdBackup(t testing.TB, backup string) {
	t.Helper()
	e.Stop()
	if err := os.RemoveAll(e.DataDir()); err != nil {
		t.Fatalf("etcdtest: restore: %v", err)
	}
	if err := copyTree(backup, e.DataDir()); err != nil {
		t.Fatalf("etcdtest: restore: %v", err)
	}
	e.Restart(t)
}

// Snapshot takes a snapshot of the running member (`etcdctl snapshot save`)
// and returns its file.
func (e *Etcd) Snapshot(t testing.TB, ctx context.Context) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "etcd-snapshot.db")
	rc, err := e.Client().Snapshot(ctx)
	if err != nil {
		t.Fatalf("etcdtest: snapshot: %v", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatalf("etcdtest: snapshot: %v", err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		t.Fatalf("etcdtest: snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("etcdtest: snapshot: %v", err)
	}
	return path
}

// SnapshotRestore is how RestoreSnapshot rebuilds the data directory.
type SnapshotRestore struct {
	// RevisionBump and MarkCompacted are etcdutl's --bump-revision and
	// --mark-compacted, which etcd recommends when restoring the etcd of a
	// Kubernetes cluster: the revision moves on instead of going back, and
	// watchers re-list. Zero: a plain restore, the revision goes back to
	// the snapshot's.
	RevisionBump  uint64
	MarkCompacted bool
}

// RestoreSnapshot stops the member, rebuilds its data directory from the
// snapshot file (`etcdutl snapshot restore`, with the member's name, peer
// URL and cluster token, so the cluster and member IDs stay the same) and
// starts it again.
func (e *Etcd) RestoreSnapshot(t testing.TB, path string, how SnapshotRestore) {
	t.Helper()
	e.Stop()
	if err := os.RemoveAll(e.DataDir()); err != nil {
		t.Fatalf("etcdtest: restore: %v", err)
	}
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        path,
		Name:                e.cfg.Name,
		OutputDataDir:       e.DataDir(),
		PeerURLs:            []string{e.cfg.PeerURL},
		InitialCluster:      e.cfg.InitialCluster,
		InitialClusterToken: e.cfg.InitialClusterToken,
		RevisionBump:        how.RevisionBump,
		MarkCompacted:       how.MarkCompacted,
	})
	if err != nil {
		t.Fatalf("etcdtest: restore snapshot %s: %v", path, err)
	}
	e.Restart(t)
}

// copyTree copies the files under src to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		return copyFile(path, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
