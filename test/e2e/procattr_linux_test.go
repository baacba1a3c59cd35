package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithTest makes the kernel kill cmd when the test binary dies, so a
// test that panics (e.g. on -timeout, which skips t.Cleanup) leaves no
// server running.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
