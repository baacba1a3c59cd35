package app

import (
	"testing"
	"time"

	"github.com/allocator/allocator/pkg/repair"
)

// TestRepairLeakGraceDefault: the one-shot job's --leak-grace defaults to the
// repair package's grace, which outlasts the request timeout. It once
// defaulted to 10 s and freed the address of a slow create.
func TestRepairLeakGraceDefault(t *testing.T) {
	flag := newRepairCommand(Streams{}, false).Flags().Lookup("leak-grace")
	if flag == nil {
		t.Fatal("no --leak-grace flag")
	}
	got, err := time.ParseDuration(flag.DefValue)
	if err != nil {
		t.Fatal(err)
	}
	if got != repair.DefaultLeakGrace || got <= repair.RequestTimeout {
		t.Fatalf("--leak-grace default %v, want repair.DefaultLeakGrace %v (> request timeout %v)", got, repair.DefaultLeakGrace, repair.RequestTimeout)
	}
}
