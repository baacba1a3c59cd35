package procstat

import (
	"os"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMemTotal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     int64
		wantErr  bool
	}{
		{"linux", "MemTotal:       24563720 kB\nMemFree:        20000000 kB\n", 24563720 << 10, false},
		{"not first", "MemFree: 1 kB\nMemTotal: 2048 kB\n", 2 << 20, false},
		{"missing", "MemFree: 1 kB\n", 0, true},
		{"no unit", "MemTotal: 2048\n", 0, true},
		{"not a number", "MemTotal: lots kB\n", 0, true},
		{"zero", "MemTotal: 0 kB\n", 0, true},
		{"empty", "", 0, true},
	} {
		got, err := parseMemTotal([]byte(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: parseMemTotal = %d, %v; want %d, error %v", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseCgroupLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 -1,
		"9223372036854771712\n": -1, // v1's "no limit", a page short of the largest int64
		"0\n":                   -1,
		"-1\n":                  -1,
		"lots\n":                -1,
		"":                      -1,
	} {
		got, ok := parseCgroupLimit([]byte(in))
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestCgroupLimitFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"v2 in a container's namespace", "0::/\n", []string{"/sys/fs/cgroup/memory.max"}},
		{"v2 on a host", "0::/kubepods.slice/pod1/ctr\n", []string{
			"/sys/fs/cgroup/kubepods.slice/pod1/ctr/memory.max",
			"/sys/fs/cgroup/kubepods.slice/pod1/memory.max",
			"/sys/fs/cgroup/kubepods.slice/memory.max",
			"/sys/fs/cgroup/memory.max",
		}},
		{"v1", "12:cpu,cpuacct:/a\n4:memory:/docker/abc\n1:name=systemd:/x\n", []string{
			"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
			"/sys/fs/cgroup/memory/docker/memory.limit_in_bytes",
			"/sys/fs/cgroup/memory/memory.limit_in_bytes",
		}},
		{"v1 memory among others", "7:blkio,memory:/\n", []string{"/sys/fs/cgroup/memory/memory.limit_in_bytes"}},
		{"no memory controller", "3:cpu:/a\n", nil},
		{"garbage", "nothing here\n0:/\n", nil},
	} {
		if diff := cmp.Diff(tc.want, cgroupLimitFiles([]byte(tc.in))); diff != "" {
			t.Errorf("%s: cgroupLimitFiles (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestMemoryCapSelf reads this machine: on Linux a cap at least as large
// as what this test process holds.
func TestMemoryCapSelf(t *testing.T) {
	t.Parallel()
	got, err := MemoryCap()
	if runtime.GOOS != "linux" {
		if err == nil && got <= 0 {
			t.Errorf("MemoryCap = %d with no error", got)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	rss, err := Meter{PIDs: []int{os.Getpid()}}.RSS()
	if err != nil {
		t.Fatal(err)
	}
	if got < rss {
		t.Errorf("MemoryCap = %d bytes, less than this process's RSS %d", got, rss)
	}
}
