package main

import (
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseGC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     string
		want    gcCounters
		wantErr bool
	}{
		{name: "both", raw: "# HELP go_gc_heap_allocs_bytes_total x\n# TYPE go_gc_heap_allocs_bytes_total counter\ngo_gc_heap_allocs_bytes_total 2.887864e+07\ngo_cpu_classes_gc_total_cpu_seconds_total 0.028354381\ngo_cpu_classes_total_cpu_seconds_total 0.81\n",
			want: gcCounters{cpuSeconds: 0.028354381, allocBytes: 2.887864e+07}},
		{name: "no trailing newline", raw: "go_cpu_classes_gc_total_cpu_seconds_total 1\ngo_gc_heap_allocs_bytes_total 2",
			want: gcCounters{cpuSeconds: 1, allocBytes: 2}},
		{name: "a longer name is another metric", raw: "go_cpu_classes_gc_total_cpu_seconds_total_x 1\ngo_gc_heap_allocs_bytes_total 2\n", wantErr: true},
		{name: "one missing", raw: "go_gc_heap_allocs_bytes_total 2\n", wantErr: true},
		{name: "not a number", raw: "go_cpu_classes_gc_total_cpu_seconds_total x\ngo_gc_heap_allocs_bytes_total 2\n", wantErr: true},
		{name: "empty", raw: "", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGC([]byte(tc.raw))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestForEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	if err := forEach(3, 103, 8, func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		seen[i]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 103; i++ {
		if seen[i] != 1 {
			t.Fatalf("%d done %d times", i, seen[i])
		}
	}
	if len(seen) != 100 {
		t.Fatalf("%d indices done, want 100", len(seen))
	}

	boom := errors.New("boom")
	var done int
	err := forEach(0, 100000, 4, func(i int) error {
		mu.Lock()
		defer mu.Unlock()
		done++
		if i == 10 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if done > 1000 {
		t.Fatalf("%d indices done after the error, want it to stop handing them out", done)
	}
}

func TestV4CountAndMedian(t *testing.T) {
	if got := []int{v4Count(100000, 10), v4Count(10000, 10), v4Count(9, 10), v4Count(10, 10), v4Count(7, 0)}; !cmp.Equal(got, []int{90000, 9000, 9, 9, 7}) {
		t.Fatalf("v4Count: %v", got)
	}
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Fatalf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
