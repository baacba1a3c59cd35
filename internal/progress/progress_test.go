package progress

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFormatProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		done, total int64
		elapsed     time.Duration
		want        string
	}{
		{0, 5000, 2 * time.Second, "IPAddresses: 0/5000 (0.0%), 0/s, ETA -"},
		{1200, 5000, 3 * time.Second, "IPAddresses: 1200/5000 (24.0%), 400/s, ETA 10s"},
		{4999, 5000, 10 * time.Second, "IPAddresses: 4999/5000 (100.0%), 500/s, ETA 0s"},
		{100, 100000, 10 * time.Second, "IPAddresses: 100/100000 (0.1%), 10/s, ETA 2h46m30s"},
		{0, 0, 0, "IPAddresses: 0/0 (100.0%), 0/s, ETA -"},
	}
	for _, tt := range tests {
		if got := formatProgress("IPAddresses", tt.done, tt.total, tt.elapsed); got != tt.want {
			t.Errorf("formatProgress(%d, %d, %v) = %q, want %q", tt.done, tt.total, tt.elapsed, got, tt.want)
		}
	}
	if got := finalProgress("bits", 3, 10, 1500*time.Millisecond); got != "bits: 3/10, stopped after 1.5s" {
		t.Errorf("finalProgress, stopped: %q", got)
	}
	if got := finalProgress("bits", 10, 10, 1500*time.Millisecond); got != "bits: 10/10 done in 1.5s" {
		t.Errorf("finalProgress, done: %q", got)
	}
}

// TestProgressPlainLines: on a writer that is not a terminal, progress
// prints whole lines, no carriage return or escape sequence, and a last line.
func TestProgressPlainLines(t *testing.T) {
	t.Parallel()
	var out syncWriter
	p := newProgress(&out, "IPAddresses", 10)
	p.Add(4)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "\n") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.Add(6)
	p.Stop()
	got := out.String()
	if strings.ContainsAny(got, "\r\x1b") {
		t.Errorf("plain output has control characters: %q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) < 2 || !regexp.MustCompile(`^IPAddresses: 4/10 \(40\.0%\), \d+/s, ETA \S+$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^IPAddresses: 10/10 done in \S+$`).MatchString(lines[len(lines)-1]) {
		t.Errorf("plain progress lines: %q", lines)
	}
}

type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(b)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
