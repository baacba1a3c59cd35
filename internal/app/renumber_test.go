package app

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/internal/renumber"
)

// TestRenumberFlags: flags that cannot work are refused at once, before
// any cluster is reached, in one line.
func TestRenumberFlags(t *testing.T) {
	t.Parallel()
	kube := "--kubeconfig=/nonexistent/kubeconfig"
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"renumber", kube}, "error: --from is required: the draining ServiceCIDR to empty; see allocator renumber --help\n"},
		{[]string{"renumber", kube, "--from=old", "--batch=0"}, "error: --batch 0: must be at least 1\n"},
		{[]string{"renumber", kube, "--from=old", "-n", "a", "-A"}, "error: -n and -A: give one\n"},
		{[]string{"renumber", kube, "--from=old", "-l", "a in"}, "error: --selector \"a in\": "},
		{[]string{"renumber", kube, "--from=old", "-o", "wide"}, "error: unknown output format \"wide\": use table or json, yaml"},
		{[]string{"renumber", kube, "--from=old"}, "error: kubernetes client config: stat /nonexistent/kubeconfig"},
	} {
		_, stderr, code := runApp(t, tt.args...)
		if code != 1 || !strings.HasPrefix(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestRenumberHelp: the help says what clients see, that it is a dry run
// by default, and names the journal and the annotation.
func TestRenumberHelp(t *testing.T) {
	t.Parallel()
	out, _, code := runApp(t, "renumber", "--help")
	for _, want := range []string{"DNS follows, connections to the", "--dry-run=false", "--journal", "lifecycle.allocator.github.io/draining=true", "-A, --all-namespaces", "-l, --selector", "--keep-static-offsets", "keeps its offset: 10.96.0.10 of 10.96.0.0/16 becomes 10.100.0.10"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("renumber --help (exit %d) lacks %q", code, want)
		}
	}
	if out, _, _ := runApp(t, "--help"); !strings.Contains(out, "renumber") {
		t.Error("allocator --help does not list renumber")
	}
	plugin := newRootCommand(Streams{}, true)
	if cmd, _, err := plugin.Find([]string{"renumber"}); err != nil || cmd.Name() != "renumber" {
		t.Errorf("the kubectl plugin has no renumber (%v)", err)
	}
}

func TestRenumberOutput(t *testing.T) {
	t.Parallel()
	moves := []renumber.Move{
		{Namespace: "a", Name: "web", OldIPs: []string{"10.1.0.5"}, NewIPs: []string{"10.2.0.9"}, Outcome: renumber.Moved},
		{Namespace: "default", Name: "kubernetes", OldIPs: []string{"10.1.0.1"}, Outcome: renumber.Left, Reason: "the API server's own Service"},
	}
	tests := []struct {
		name     string
		res      renumber.Result
		want     string
		wantExit string // "" for success
	}{
		{
			name: "moved, the API server's own left",
			res:  renumber.Result{From: "old", FromCIDRs: []string{"10.1.0.0/24"}, Moves: moves, Verified: true, Duration: 2 * time.Second},
			want: `NAMESPACE  NAME        CLUSTER-IPS  NEW CLUSTER-IPS  RESULT
a          web         10.1.0.5     10.2.0.9         moved
default    kubernetes  10.1.0.1     -                left
default/kubernetes left: the API server's own Service
1 Service moved out of ServiceCIDR old (10.1.0.0/24) in 2s (0.5/s); 1 left; verified
`,
		},
		{
			name: "dry run, outside the selection",
			res: renumber.Result{From: "old", FromCIDRs: []string{"10.1.0.0/24"}, DryRun: true, Outside: 3,
				Moves: []renumber.Move{{Namespace: "a", Name: "web", OldIPs: []string{"10.1.0.5"}, Outcome: renumber.WouldMove}}},
			want: `NAMESPACE  NAME  CLUSTER-IPS  NEW CLUSTER-IPS  RESULT
a          web   10.1.0.5     -                would move
dry run: 1 Service would move out of ServiceCIDR old (10.1.0.0/24); 3 more Services in the range outside the selection (-A, -n and -l choose); nothing changed; --dry-run=false moves them
`,
		},
		{
			name: "left and pending",
			res: renumber.Result{From: "old", FromCIDRs: []string{"10.1.0.0/24"}, Verified: true, Moves: []renumber.Move{
				{Namespace: "a", Name: "fin", OldIPs: []string{"10.1.0.6"}, Outcome: renumber.Left, Reason: "has finalizers x"},
				{Namespace: "a", Name: "gone", OldIPs: []string{"10.1.0.7"}, Outcome: renumber.Pending, Reason: "create: range is full"},
			}},
			wantExit: "2 Services not moved: a/fin, a/gone",
		},
		{
			name: "node port changed",
			res: renumber.Result{From: "old", FromCIDRs: []string{"10.1.0.0/24"}, Verified: true, Moves: []renumber.Move{
				{Namespace: "a", Name: "np", OldIPs: []string{"10.1.0.8"}, NewIPs: []string{"10.96.0.8"}, Outcome: renumber.Changed,
					Reason: "taken by another Service while it was gone: node port 30080 of port 80/TCP is now 31234"},
			}},
			wantExit: "1 Service moved with a node port, kept address or static-band offset changed: a/np",
		},
		{
			name: "dry run, static-band offsets kept",
			res: renumber.Result{From: "kubernetes", FromCIDRs: []string{"10.96.0.0/16", "fd00:96::/112"}, DryRun: true, Moves: []renumber.Move{
				{Namespace: "kube-system", Name: "kube-dns", OldIPs: []string{"10.96.0.10", "fd00:96::a"}, NewIPs: []string{"10.100.0.10", "fd00:100::a"},
					Outcome: renumber.WouldMove, Offsets: []renumber.Offset{
						{Old: netip.MustParseAddr("10.96.0.10"), New: netip.MustParseAddr("10.100.0.10"), N: 10},
						{Old: netip.MustParseAddr("fd00:96::a"), New: netip.MustParseAddr("fd00:100::a"), N: 10}}},
				{Namespace: "kube-system", Name: "metrics", OldIPs: []string{"10.96.0.11"}, Outcome: renumber.Left,
					Reason: "10.96.0.11 is in the static band and keeps its offset 11 as 10.100.0.11, which Service a/squatter holds"},
			}},
			want: `NAMESPACE    NAME      CLUSTER-IPS            NEW CLUSTER-IPS          RESULT
kube-system  kube-dns  10.96.0.10,fd00:96::a  10.100.0.10,fd00:100::a  would move
kube-system  metrics   10.96.0.11             -                        left
kube-system/metrics left: 10.96.0.11 is in the static band and keeps its offset 11 as 10.100.0.11, which Service a/squatter holds
kube-system/kube-dns would keep its static-band offset: 10.96.0.10 -> 10.100.0.10 (offset 10), fd00:96::a -> fd00:100::a (offset 10)
dry run: 1 Service would move out of ServiceCIDR kubernetes (10.96.0.0/16,fd00:96::/112); 1 left; 1 Service would keep its static-band offset; nothing changed; --dry-run=false moves them
`,
			wantExit: "1 Service not moved: kube-system/metrics",
		},
		{
			name:     "verification problems",
			res:      renumber.Result{From: "old", Moves: moves[:1], Problems: []string{"a/web: labels differ"}},
			wantExit: "the verification found 1 problem",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := writeRenumber(&out, &tc.res); err != nil {
				t.Fatal(err)
			}
			if tc.want != "" {
				if diff := cmp.Diff(tc.want, out.String()); diff != "" {
					t.Errorf("output (-want +got):\n%s", diff)
				}
			}
			err := renumberExit(&tc.res)
			switch {
			case tc.wantExit == "" && err != nil:
				t.Errorf("exit error %v, want none", err)
			case tc.wantExit != "" && (err == nil || err.Error() != tc.wantExit):
				t.Errorf("exit error %v, want %q", err, tc.wantExit)
			}
		})
	}
}
