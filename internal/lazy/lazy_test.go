package lazy

import (
	"errors"
	"testing"
)

// TestValue: built on the first Get, kept until Invalidate, rebuilt after
// it; a failed build is retried at the next Get and keeps the last value.
func TestValue(t *testing.T) {
	t.Parallel()
	var v Value[int]
	builds := 0
	build := func() (int, error) { builds++; return builds * 10, nil }
	for range 3 {
		if got, err := v.Get(build); got != 10 || err != nil {
			t.Fatalf("Get = %d, %v; want 10 (one build)", got, err)
		}
	}
	v.Invalidate()
	if got, _ := v.Get(build); got != 20 || builds != 2 {
		t.Fatalf("after Invalidate: Get = %d after %d builds; want 20 after 2", got, builds)
	}
	v.Invalidate()
	boom := errors.New("boom")
	if got, err := v.Get(func() (int, error) { return 0, boom }); got != 20 || !errors.Is(err, boom) {
		t.Fatalf("failed build: Get = %d, %v; want the last value 20 and the error", got, err)
	}
	if got, _ := v.Get(build); got != 30 {
		t.Fatalf("after a failed build: Get = %d, want a rebuild (30)", got)
	}
}
