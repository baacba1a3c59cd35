package allocation

import (
	"errors"
	"fmt"
	"testing"
)

// TestIsRetriable: a mark survives wrapping; a join is retriable only when
// every part is; nothing unmarked is.
func TestIsRetriable(t *testing.T) {
	t.Parallel()
	base := errors.New("connection reset by peer")
	marked := Retriable(base)
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"unmarked", base, false},
		{"marked", marked, true},
		{"marked, wrapped", fmt.Errorf("release 10.0.0.1: %w", marked), true},
		{"join of marked", errors.Join(marked, Retriable(errors.New("other"))), true},
		{"join with an unmarked part", errors.Join(marked, base), false},
		{"two %w, one unmarked", fmt.Errorf("%w; %w", marked, base), false},
		{"Retriable(nil)", Retriable(nil), false},
	} {
		if got := IsRetriable(tt.err); got != tt.want {
			t.Errorf("%s: IsRetriable = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !errors.Is(marked, base) || marked.Error() != base.Error() {
		t.Errorf("Retriable changes the error: %v", marked)
	}
}
