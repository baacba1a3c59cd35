package e2e

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// startDyingWithTest starts cmd so that the kernel kills it when the test
// binary dies (Pdeathsig), so a test that panics (e.g. on -timeout, which
// skips t.Cleanup) leaves no server running.
//
// Pdeathsig fires when the thread that forked the child ends, not the
// process, and Go ends a thread when a goroutine locked to it returns
// (manifest_contain_linux_test.go's does, on purpose, to drop the
// capabilities it reduced): a child forked from a thread such a goroutine
// later takes dies with it. So every child is forked from one thread that
// stays locked to its goroutine for the binary's life.
func startDyingWithTest(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	launcherOnce.Do(func() { go launcher() })
	done := make(chan error, 1)
	launches <- launch{cmd: cmd, done: done}
	return <-done
}

type launch struct {
	cmd  *exec.Cmd
	done chan<- error
}

var (
	launcherOnce sync.Once
	launches     = make(chan launch)
)

// launcher starts the commands sent to it from a thread of its own, which
// it never gives back: the thread ends only with the binary.
func launcher() {
	runtime.LockOSThread()
	for l := range launches {
		l.done <- l.cmd.Start()
	}
}

// tryLock takes an exclusive lock on the file path (created if missing)
// without waiting, and returns its release; false when another process
// holds it or the file cannot be opened.
func tryLock(path string) (unlock func(), ok bool) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return func() { _ = f.Close() }, true // closing releases the lock
}
