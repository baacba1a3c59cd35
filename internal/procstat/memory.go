package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// MemoryCap returns how much memory this process may use: the machine's
// (MemTotal in /proc/meminfo), or less when its cgroup or one of the
// cgroup's ancestors sets a limit (memory.max under cgroup v2,
// memory.limit_in_bytes under v1). An error means the machine's memory is
// unknown (not Linux, or /proc unreadable); a cgroup that cannot be read
// only leaves the machine's figure.
func MemoryCap() (int64, error) {
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("memory of the machine: %w", err)
	}
	total, err := parseMemTotal(meminfo)
	if err != nil {
		return 0, fmt.Errorf("memory of the machine: %w", err)
	}
	if groups, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, limitFile := range cgroupLimitFiles(groups) {
			if raw, err := os.ReadFile(limitFile); err == nil {
				if limit, ok := parseCgroupLimit(raw); ok && limit < total {
					total = limit
				}
			}
		}
	}
	return total, nil
}

// parseMemTotal reads the MemTotal line of /proc/meminfo, in bytes.
func parseMemTotal(meminfo []byte) (int64, error) {
	s := bufio.NewScanner(bytes.NewReader(meminfo))
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb <= 0 {
				return 0, fmt.Errorf("MemTotal %q", fields[1])
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no MemTotal line in /proc/meminfo")
}

// cgroupLimitFiles returns, for the process's cgroups as /proc/self/cgroup
// lists them, the memory limit file of its cgroup and of every ancestor up
// to the hierarchy's root (a parent's limit bounds its children): v2's
// unified hierarchy ("0::/path") and v1's memory controller
// ("N:...memory...:/path"). Paths are as the process's cgroup namespace
// shows them, which is what /sys/fs/cgroup holds inside a container.
func cgroupLimitFiles(groups []byte) []string {
	var files []string
	for _, line := range strings.Split(string(groups), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		var dir, file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			dir, file = "/sys/fs/cgroup", "memory.max"
		case hasController(parts[1], "memory"):
			dir, file = "/sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for p := path.Clean(parts[2]); ; p = path.Dir(p) {
			files = append(files, path.Join(dir, p, file))
			if p == "/" {
				break
			}
		}
	}
	return files
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// parseCgroupLimit reads a cgroup memory limit: bytes, or "max" (v2) or a
// number near the largest int64 (v1's "no limit"), which are none.
func parseCgroupLimit(raw []byte) (int64, bool) {
	text := strings.TrimSpace(string(raw))
	if text == "max" {
		return 0, false
	}
	limit, err := strconv.ParseInt(text, 10, 64)
	if err != nil || limit <= 0 || limit >= 1<<62 {
		return 0, false
	}
	return limit, true
}
