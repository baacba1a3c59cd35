package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// containerProcess is a container's process started on the node the way
// the container runtime starts it, as far as files and credentials go:
// chrooted into its root filesystem, with the container's uid, gid and
// supplementary groups, its capability bounding set (the runtime's default
// set with the manifest's drop and add), and no_new_privs when
// allowPrivilegeEscalation is false. Not imitated: namespaces, seccomp,
// cgroups.
type containerProcess struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error // Wait's result; whoever reads it puts it back
}

// startContainer starts argv (paths inside root) in root as p's container.
// The process is stopped (SIGTERM, then SIGKILL after 30 s) when the test
// ends.
func startContainer(t *testing.T, root string, p *manifestPod, argv, env []string) *containerProcess {
	t.Helper()
	caps, err := containerCaps(p.container.SecurityContext)
	if err != nil {
		t.Fatalf("%s: %v", p.file, err)
	}
	noNewPrivs := false
	if sc := p.container.SecurityContext; sc != nil && sc.AllowPrivilegeEscalation != nil {
		noNewPrivs = !*sc.AllowPrivilegeEscalation
	}
	c := &containerProcess{cmd: exec.Command(argv[0], argv[1:]...), log: newSyncBuffer(), done: make(chan error, 1)}
	c.cmd.Env, c.cmd.Dir = env, "/"
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     root,
		Credential: &syscall.Credential{Uid: p.identity.uid, Gid: p.identity.gid, Groups: p.identity.groups},
		Pdeathsig:  syscall.SIGKILL,
	}
	started := make(chan error, 1)
	go func() {
		// The capability bounding set and no_new_privs belong to a thread,
		// and the child inherits those of the thread that forks it: this
		// goroutine keeps its thread to itself and never unlocks it, so the
		// thread, with its reduced set, ends with the goroutine. It waits
		// for the child too, because Pdeathsig fires when the thread that
		// started the child ends.
		runtime.LockOSThread()
		if err := restrictThread(caps, noNewPrivs); err != nil {
			started <- err
			return
		}
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.done <- c.cmd.Wait()
	}()
	if err := <-started; err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("start %v as %s: %v: the test needs root with CAP_SETPCAP, CAP_SYS_CHROOT, CAP_SETUID and CAP_SETGID", argv, p.identity, err)
		}
		t.Fatalf("start %v as %s in %s: %v", argv, p.identity, root, err)
	}
	t.Cleanup(func() {
		if c.exited(0) {
			return
		}
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		if !c.exited(30 * time.Second) {
			_ = c.cmd.Process.Kill()
			c.exited(time.Minute)
		}
	})
	return c
}

// exited reports whether the process ended within wait.
func (c *containerProcess) exited(wait time.Duration) bool {
	select {
	case err := <-c.done:
		c.done <- err
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	select {
	case err := <-c.done:
		c.done <- err
		return true
	case <-time.After(wait):
		return false
	}
}

// exitCode is the process's exit code once it has exited (-1 for a
// signal).
func (c *containerProcess) exitCode() int {
	err := <-c.done
	c.done <- err
	return c.cmd.ProcessState.ExitCode()
}

// effectiveCaps is the process's effective capability set, from /proc.
func (c *containerProcess) effectiveCaps() (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff in /proc/%d/status", c.cmd.Process.Pid)
}

// prctl options of linux/prctl.h.
const (
	prCapbsetDrop        = 24
	prSetNoNewPrivs      = 38
	prCapAmbient         = 47
	prCapAmbientClearAll = 4
)

// restrictThread narrows the calling thread's capability bounding set to
// keep and empties its inheritable and ambient sets, so that a program it
// executes, even as uid 0, gets no capability beyond keep; with
// noNewPrivs, it sets no_new_privs.
func restrictThread(keep []uint, noNewPrivs bool) error {
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return err
	}
	lastCap, err := strconv.Atoi(strings.TrimSpace(string(last)))
	if err != nil {
		return err
	}
	for c := uint(0); c <= uint(lastCap); c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prCapbsetDrop, uintptr(c), 0, 0, 0, 0); e != 0 {
			return os.NewSyscallError("prctl(PR_CAPBSET_DROP)", e)
		}
	}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0, 0, 0, 0); e != 0 {
		return os.NewSyscallError("prctl(PR_CAP_AMBIENT_CLEAR_ALL)", e)
	}
	// capget/capset with _LINUX_CAPABILITY_VERSION_3: two 32-bit words
	// per set.
	hdr := struct {
		version uint32
		pid     int32
	}{version: 0x20080522}
	var sets [2]struct{ effective, permitted, inheritable uint32 }
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&sets[0])), 0); e != 0 {
		return os.NewSyscallError("capget", e)
	}
	sets[0].inheritable, sets[1].inheritable = 0, 0
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&sets[0])), 0); e != 0 {
		return os.NewSyscallError("capset", e)
	}
	if noNewPrivs {
		if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
			return os.NewSyscallError("prctl(PR_SET_NO_NEW_PRIVS)", e)
		}
	}
	return nil
}

// fileOwner is the uid and gid of a file.
func fileOwner(info fs.FileInfo) (uid, gid int) {
	st := info.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
