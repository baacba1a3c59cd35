package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on every
// Linux kernel Go supports in practice).
const userHZ = 100

// cpuMeter sums the CPU time (user + system) of the server's processes, so
// a phase reports CPU per operation, not only a rate: on a shared machine a
// rate says little, the CPU a request costs says what the server pays.
type cpuMeter struct{ pids []int }

func parsePIDs(list string) (cpuMeter, error) {
	var m cpuMeter
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return m, fmt.Errorf("--pids: bad pid %q", f)
		}
		m.pids = append(m.pids, pid)
	}
	return m, nil
}

// total returns the processes' CPU time so far; zero without pids.
func (m cpuMeter) total() (time.Duration, error) {
	var sum time.Duration
	for _, pid := range m.pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
		}
		// The command name (field 2) may hold spaces; fields count from
		// after its closing parenthesis: utime and stime are fields 14, 15.
		rest := string(raw[strings.LastIndexByte(string(raw), ')')+2:])
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
