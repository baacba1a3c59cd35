// Package procstat reads what a process costs from Linux's /proc: its CPU
// time and its resident memory, for the benchmarks that report CPU per
// operation and memory at scale rather than rates alone (on a shared machine
// a rate says little; the CPU a request costs says what the server pays);
// and how much memory a process may use (MemoryCap), which bounds the heap
// serve lets its start-up grow.
package procstat

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on every
// Linux kernel Go supports in practice).
const userHZ = 100

// Meter sums the CPU time (user + system) of a set of processes.
type Meter struct{ PIDs []int }

// ParsePIDs reads a comma-separated list of pids (empty: no processes).
func ParsePIDs(list string) (Meter, error) {
	var m Meter
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return m, fmt.Errorf("bad pid %q", f)
		}
		m.PIDs = append(m.PIDs, pid)
	}
	return m, nil
}

// Total returns the processes' CPU time so far; zero without pids.
func (m Meter) Total() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range m.PIDs {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
		}
		// The command name (field 2) may hold spaces; fields count from
		// after its closing parenthesis: utime and stime are fields 14, 15.
		rest := string(raw[bytes.LastIndexByte(raw, ')')+2:])
		fields := strings.Fields(rest)
		if len(fields) < 13 {
			return 0, fmt.Errorf("cpu of pid %d: short /proc stat", pid)
		}
		for _, f := range fields[11:13] {
			ticks, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
			}
			sum += time.Duration(ticks) * time.Second / userHZ
		}
	}
	return sum, nil
}

// RSS returns the processes' resident memory, summed, in bytes (VmRSS).
func (m Meter) RSS() (int64, error) {
	var sum int64
	for _, pid := range m.PIDs {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, fmt.Errorf("memory of pid %d: %w", pid, err)
		}
		found := false
		s := bufio.NewScanner(f)
		for s.Scan() {
			fields := strings.Fields(s.Text())
			if len(fields) == 3 && fields[0] == "VmRSS:" && fields[2] == "kB" {
				kb, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					f.Close()
					return 0, fmt.Errorf("memory of pid %d: %w", pid, err)
				}
				sum += kb << 10
				found = true
				break
			}
		}
		f.Close()
		if !found {
			return 0, fmt.Errorf("memory of pid %d: no VmRSS in /proc status", pid)
		}
	}
	return sum, nil
}
