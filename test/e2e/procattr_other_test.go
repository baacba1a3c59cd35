//go:build !linux

package e2e

import "os/exec"

// startDyingWithTest starts cmd: only Linux can tie a child's life to its
// parent's.
func startDyingWithTest(cmd *exec.Cmd) error { return cmd.Start() }

// tryLock is never granted here: callers fall back to a path of their own.
func tryLock(string) (unlock func(), ok bool) { return nil, false }
