package repair_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/pkg/repair"
)

func TestOptionsWithDefaults(t *testing.T) {
	t.Parallel()
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return fixed }
	tests := []struct {
		name string
		in   repair.Options
		want repair.Options
	}{
		{
			name: "zero gets every default",
			want: repair.Options{Interval: repair.DefaultInterval, LeakGrace: repair.DefaultLeakGrace, OrphanGrace: repair.DefaultOrphanGrace},
		},
		{
			name: "negative durations are unset",
			in:   repair.Options{Interval: -time.Second, LeakGrace: -time.Second, OrphanGrace: -time.Second},
			want: repair.Options{Interval: repair.DefaultInterval, LeakGrace: repair.DefaultLeakGrace, OrphanGrace: repair.DefaultOrphanGrace},
		},
		{
			name: "set values are kept",
			in:   repair.Options{Interval: time.Hour, LeakGrace: time.Nanosecond, OrphanGrace: 2 * time.Second, DryRun: true, Now: clock},
			want: repair.Options{Interval: time.Hour, LeakGrace: time.Nanosecond, OrphanGrace: 2 * time.Second, DryRun: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.in.WithDefaults()
			if got.Now == nil {
				t.Fatal("Now not set")
			}
			if tt.in.Now != nil && !got.Now().Equal(fixed) {
				t.Errorf("Now = %v, want the clock given", got.Now())
			}
			if again := got.WithDefaults(); again.Interval != got.Interval || again.LeakGrace != got.LeakGrace || again.OrphanGrace != got.OrphanGrace {
				t.Errorf("WithDefaults is not idempotent: %+v then %+v", got, again)
			}
			got.Now = nil // funcs do not compare
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("WithDefaults (-want +got):\n%s", diff)
			}
		})
	}
}

// The defaults outlast what they guard against: a create holds a reserved
// key unstored for up to the request timeout.
func TestDefaultGracesExceedRequestTimeout(t *testing.T) {
	t.Parallel()
	if repair.DefaultLeakGrace <= repair.RequestTimeout {
		t.Errorf("DefaultLeakGrace %v does not exceed the request timeout %v", repair.DefaultLeakGrace, repair.RequestTimeout)
	}
	if repair.DefaultOrphanGrace < repair.RequestTimeout {
		t.Errorf("DefaultOrphanGrace %v is shorter than the request timeout %v", repair.DefaultOrphanGrace, repair.RequestTimeout)
	}
}
