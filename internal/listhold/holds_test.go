package listhold

import (
	"testing"
	"time"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestHoldsOldest(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	h := NewHolds(Limits{Idle: 10 * time.Second, MaxAge: 20 * time.Second}, clock.now)
	expect := func(step string, want int64) {
		t.Helper()
		got, held := h.Oldest()
		if want == 0 && held {
			t.Errorf("%s: oldest hold %d, want none", step, got)
		}
		if want != 0 && (!held || got != want) {
			t.Errorf("%s: oldest hold %d (held %v), want %d", step, got, held, want)
		}
	}
	expect("nothing touched", 0)
	h.Touch(0)
	h.Touch(-3)
	expect("revisions 0 and -3 touched", 0)

	h.Touch(200)
	clock.advance(2 * time.Second)
	h.Touch(100)
	h.Touch(300)
	expect("three lists", 100)

	// 100 is idle past the limit; 200 and 300 are paged on.
	for range 2 {
		clock.advance(6 * time.Second)
		h.Touch(200)
		h.Touch(300)
	}
	expect("revision 100 idle for 12 s", 200)

	// 200 started 22 s ago: past MaxAge, however often it is paged.
	clock.advance(8 * time.Second)
	h.Touch(200)
	h.Touch(300)
	expect("revision 200 past its maximum age", 300)

	clock.advance(11 * time.Second)
	expect("every list idle", 0)
}

func TestHoldsChangedOnNewRevisionOnly(t *testing.T) {
	h := NewHolds(Limits{}, nil)
	changed := func() bool {
		select {
		case <-h.Changed():
			return true
		default:
			return false
		}
	}
	h.Touch(7)
	if !changed() {
		t.Fatal("a new revision held: Changed not signalled")
	}
	h.Touch(7)
	if changed() {
		t.Error("a page of a list held already signalled Changed")
	}
	h.Touch(8)
	h.Touch(9)
	if !changed() {
		t.Error("two new revisions held: Changed not signalled")
	}
	if changed() {
		t.Error("Changed signalled twice for one wake-up")
	}
}

func TestLimitsWithDefaults(t *testing.T) {
	if got, want := (Limits{}).WithDefaults(), (Limits{Idle: DefaultIdle, MaxAge: DefaultMaxAge}); got != want {
		t.Errorf("zero limits with defaults: %+v, want %+v", got, want)
	}
	l := Limits{Idle: time.Second, MaxAge: time.Hour}
	if got := l.WithDefaults(); got != l {
		t.Errorf("set limits with defaults: %+v, want them unchanged", got)
	}
}
