package iprepair

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMergeKeys: two sorted lists merge into one sorted list with each key
// once, whichever list holds a key, and however often: what sorting the
// two lists together and dropping repeats gives.
func TestMergeKeys(t *testing.T) {
	t.Parallel()
	pool := []string{"10.0.0.1", "10.0.0.2", "10.0.0.10", "9.255.255.255", "fd00::1", "fd00::a", "::ffff:10.0.0.1",
		invalidKeyPrefix + "10.0.0.01", invalidKeyPrefix + "bad", "weird"}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var a, b []string
		for range rng.IntN(8) {
			a = append(a, pool[rng.IntN(len(pool))])
		}
		for range rng.IntN(8) {
			b = append(b, pool[rng.IntN(len(pool))])
		}
		want := slices.Concat(a, b)
		sortKeys(want)
		want = slices.Compact(want)
		got := mergeKeys(sortedKeys(a), sortedKeys(b))
		if len(want) == 0 {
			want = []string{}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("round %d, merge of %q and %q (-want +got):\n%s", round, a, b, diff)
		}
	}
}
