//go:build !linux

package e2e

import (
	"io/fs"
	"testing"
	"time"
)

// containerProcess: only Linux can start a process as a container's
// (chroot, credentials, capability bounding set); the tests that need one
// skip elsewhere.
type containerProcess struct{ log *syncBuffer }

func startContainer(t *testing.T, _ string, _ *manifestPod, _, _ []string) *containerProcess {
	t.Skip("starting a container's process needs Linux")
	return nil
}

func (*containerProcess) exited(time.Duration) bool      { return false }
func (*containerProcess) exitCode() int                  { return -1 }
func (*containerProcess) effectiveCaps() (uint64, error) { return 0, nil }

func fileOwner(fs.FileInfo) (uid, gid int) { return 0, 0 }
