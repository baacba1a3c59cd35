package procstat

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// TestMeterSelf reads this test process: CPU time grows with work, and the
// resident memory is plausible.
func TestMeterSelf(t *testing.T) {
	t.Parallel()
	m, err := ParsePIDs(" " + strconv.Itoa(os.Getpid()) + ", ")
	if err != nil || len(m.PIDs) != 1 {
		t.Fatalf("ParsePIDs = %v, %v", m, err)
	}
	before, err := m.Total()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		now, err := m.Total()
		if err != nil {
			t.Fatal(err)
		}
		if now > before {
			break
		}
		spin(20 * time.Millisecond)
	}
	if after, _ := m.Total(); after <= before {
		t.Errorf("CPU time did not grow: %v, then %v", before, after)
	}
	rss, err := m.RSS()
	if err != nil || rss < 1<<20 || rss > 64<<30 {
		t.Errorf("RSS = %d, %v", rss, err)
	}
}

func TestParsePIDsRefuses(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"x", "0", "-3", "12,abc"} {
		if _, err := ParsePIDs(bad); err == nil {
			t.Errorf("ParsePIDs(%q) succeeded", bad)
		}
	}
	if m, err := ParsePIDs(""); err != nil || len(m.PIDs) != 0 {
		t.Errorf(`ParsePIDs("") = %v, %v`, m, err)
	}
}

func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
