package repair

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// progress prints "what: done/total" to w about once a second while a long
// run goes on, and a last line when it stops. A nil w prints nothing.
type progress struct {
	done  atomic.Int64
	total int
	what  string
	w     io.Writer
	quit  chan struct{}
	wg    sync.WaitGroup
}

func newProgress(w io.Writer, what string, total int) *progress {
	p := &progress{total: total, what: what, w: w, quit: make(chan struct{})}
	if w == nil {
		return p
	}
	start := time.Now()
	p.wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-p.quit:
				fmt.Fprintf(p.w, "%s: %d/%d done in %v\n", p.what, p.done.Load(), p.total, time.Since(start).Round(time.Millisecond))
				return
			case <-tick.C:
				fmt.Fprintf(p.w, "%s: %d/%d\n", p.what, p.done.Load(), p.total)
			}
		}
	})
	return p
}

func (p *progress) add(n int) { p.done.Add(int64(n)) }

func (p *progress) stop() {
	close(p.quit)
	p.wg.Wait()
}
