// Package progress draws the CLI's progress lines for the long runs of the
// repair controllers and migrations (report.Progress): a line redrawn in
// place on a terminal, a plain line about once a second anywhere else.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/allocator/allocator/pkg/repair/report"
)

// Progress redraw periods. A terminal gets a line redrawn in place a few
// times a second; anything else (a pipe, a file, a Job's log) gets a plain
// line about once a second, so a log holds a readable history rather than
// carriage returns.
const (
	terminalRedraw = 200 * time.Millisecond
	plainEvery     = time.Second
)

// progress reports "what: done/total (percent), rate, ETA" to w while a long
// run goes on, and a last line when it stops. A nil w prints nothing.
type progress struct {
	done     atomic.Int64
	total    int64
	what     string
	w        io.Writer
	terminal bool
	start    time.Time
	quit     chan struct{}
	wg       sync.WaitGroup
}

// Writer returns a report.StartProgress that draws on w; nil w draws
// nothing.
func Writer(w io.Writer) report.StartProgress {
	if w == nil {
		return nil
	}
	return func(what string, total int) report.Progress { return newProgress(w, what, total) }
}

func newProgress(w io.Writer, what string, total int) *progress {
	p := &progress{total: int64(total), what: what, w: w, quit: make(chan struct{}), start: time.Now()}
	if w == nil {
		return p
	}
	p.terminal = isTerminal(w)
	every := plainEvery
	if p.terminal {
		every = terminalRedraw
	}
	p.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				line := finalProgress(p.what, p.done.Load(), p.total, time.Since(p.start))
				if p.terminal {
					fmt.Fprintf(p.w, "\r%s\x1b[K\n", line)
				} else {
					fmt.Fprintln(p.w, line)
				}
				return
			case <-tick.C:
				line := formatProgress(p.what, p.done.Load(), p.total, time.Since(p.start))
				if p.terminal {
					// Back to the start of the line, then clear what a
					// longer previous line left.
					fmt.Fprintf(p.w, "\r%s\x1b[K", line)
				} else {
					fmt.Fprintln(p.w, line)
				}
			}
		}
	})
	return p
}

// Add counts n more units done.
func (p *progress) Add(n int) { p.done.Add(int64(n)) }

// Stop prints the last line and waits for the printer; call it once.
func (p *progress) Stop() {
	close(p.quit)
	p.wg.Wait()
}

// formatProgress is a progress line: "IPAddresses: 1200/5000 (24.0%),
// 400/s, ETA 10s". The rate is the average since the start; the ETA is "-"
// until something is done.
func formatProgress(what string, done, total int64, elapsed time.Duration) string {
	pct := 100.0
	if total > 0 {
		pct = float64(done) / float64(total) * 100
	}
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	eta := "-"
	if rate > 0 && done <= total {
		eta = (time.Duration(float64(total-done)/rate*float64(time.Second)) + time.Second/2).Truncate(time.Second).String()
	}
	return fmt.Sprintf("%s: %d/%d (%.1f%%), %.0f/s, ETA %s", what, done, total, pct, rate, eta)
}

// finalProgress is the line printed when the run stops: finished, or
// stopped part-way (interrupted, or an error).
func finalProgress(what string, done, total int64, elapsed time.Duration) string {
	if done >= total {
		return fmt.Sprintf("%s: %d/%d done in %v", what, done, total, elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s: %d/%d, stopped after %v", what, done, total, elapsed.Round(time.Millisecond))
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too, and must get plain lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
