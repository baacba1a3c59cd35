package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allocator/allocator/internal/parity"
	"github.com/allocator/allocator/pkg/model"
)

// TestParity replays the parity corpus against our server, in every family
// configuration and both allocator models, and compares every answer with
// what a real kube-apiserver answered (testdata/parity, written by
// hack/capture-parity.sh), with the warnings we add to its answers off
// (--service-cidr-overlap-warnings=false). PARITY_WRITE=DIR writes our answers there
// instead of failing, to study a difference.
func TestParity(t *testing.T) {
	t.Parallel()
	for _, fam := range parity.Families {
		t.Run(fam.Name, func(t *testing.T) {
			want, err := parity.Load(filepath.Join("..", "..", "testdata", "parity", fam.Name+".json"))
			if err != nil && os.Getenv("PARITY_WRITE") == "" {
				t.Fatal(err)
			}
			forEachModel(t, func(t *testing.T, m string) {
				t.Parallel()
				s := startServer(t, serverOptions{serviceRange: fam.ServiceRange, model: m, upstreamAnswers: true})
				target, err := parity.NewTarget(s.restConfig)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				start := time.Now()
				byGroup := map[string]time.Duration{} // where the time goes, by the case name's first part
				got, err := parity.Run(ctx, target, parity.Corpus(fam), model.Name(m), func(c parity.Case, took time.Duration) {
					group, _, _ := strings.Cut(c.Name, "/")
					byGroup[group] += took
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d cases replayed in %s (by group: %v)", len(got), time.Since(start).Round(time.Millisecond), byGroup)
				if dir := os.Getenv("PARITY_WRITE"); dir != "" {
					rec := &parity.Record{Source: "allocator " + m, Family: fam.Name, ServiceRange: fam.ServiceRange, Cases: got}
					if err := rec.Save(filepath.Join(dir, fam.Name+"-"+m+".json")); err != nil {
						t.Fatal(err)
					}
				}
				if want == nil {
					return
				}
				diffs := parity.Compare(want.Cases, got)
				for _, d := range diffs {
					if d.Stale {
						t.Errorf("%s: the record is stale (run hack/capture-parity.sh %s): %s", d.Case, fam.Name, d.Diff)
						continue
					}
					t.Errorf("%s answers differently from kube-apiserver (-kube-apiserver +ours):\n%s", d.Case, d.Diff)
				}
				if len(diffs) > 0 {
					t.Logf("%d of %d cases differ", len(diffs), len(got))
				}
			})
		})
	}
}
