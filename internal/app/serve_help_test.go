package app

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/allocator/allocator/internal/apiserver"
)

// TestServeHelpSections: `serve --help` shows its flags in sections, the
// ranges and the model first, every flag in one of them, and no flag that
// needs a feature gate this binary cannot turn on.
func TestServeHelpSections(t *testing.T) {
	out, stderr, code := runApp(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help: exit %d, stderr %q", code, stderr)
	}
	want := []string{"Usage:", "Allocation flags:", "Serving flags:", "Etcd flags:", "Authentication flags:",
		"Authorization flags:", "Audit flags:", "Profiling flags:", "Global flags:"}
	at := -1
	for _, header := range want {
		i := strings.Index(out, "\n"+header+"\n")
		if i <= at {
			t.Fatalf("serve --help: %q missing or out of order (sections must be %v):\n%s", header, want, out)
		}
		at = i
	}
	first := out[strings.Index(out, "Allocation flags:"):strings.Index(out, "Serving flags:")]
	for _, flag := range []string{"--service-cluster-ip-range", "--service-node-port-range", "--allocator"} {
		if !strings.Contains(first, flag) {
			t.Errorf("the first section lacks %s:\n%s", flag, first)
		}
	}
	fss := apiserver.NewOptions().Flags()
	for _, name := range fss.Order {
		fss.FlagSets[name].VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(out, "--"+f.Name+" ") {
				t.Errorf("serve --help lacks --%s", f.Name)
			}
		})
	}
	if strings.Contains(out, "[Alpha]") || strings.Contains(out, "feature gate") {
		t.Errorf("serve --help offers flags that need a feature gate:\n%s", out)
	}
}
