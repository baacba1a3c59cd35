package app

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/transition"
)

// TestTransitionActionFlags: each transition action is a command of its own
// and offers only the flags it uses.
func TestTransitionActionFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		action      string
		want, avoid []string
	}{
		{"status", []string{"--etcd-servers", "--output"}, []string{"--force", "--wait", "--kubeconfig", "--service-cluster-ip-range"}},
		{"finish", []string{"--etcd-servers", "--kubeconfig", "--force", "--output"}, []string{"--wait", "--service-cluster-ip-range"}},
		{"resume", []string{"--etcd-servers", "--kubeconfig", "--wait", "--service-cluster-ip-range", "--output"}, []string{"--force"}},
	} {
		out, stderr, code := runApp(t, "transition", tt.action, "--help")
		if code != 0 {
			t.Fatalf("transition %s --help: exit %d, stderr %q", tt.action, code, stderr)
		}
		checkText(t, out, nil, tt.avoid)
		for _, flag := range tt.want {
			if !strings.Contains(out, flag+" ") {
				t.Errorf("transition %s --help lacks %s:\n%s", tt.action, flag, out)
			}
		}
	}
	_, stderr, code := runApp(t, "transition", "end")
	if want := "error: unknown command \"end\" for \"allocator transition\"\nRun 'allocator transition --help' for usage.\n"; code != 1 || stderr != want {
		t.Errorf("transition end: exit %d, stderr %q; want %q", code, stderr, want)
	}
}

// TestTransitionFinishTwice: finish on a finished transition says so and
// leaves the stored state as it was (when and by whom it was finished).
func TestTransitionFinishTwice(t *testing.T) {
	t.Parallel()
	etcd := etcdtest.New(t)
	// --force: no Kubernetes API to check the Services' addresses against.
	args := []string{"transition", "finish", "--force", "--etcd-servers", etcd.Endpoints()[0]}
	if out, stderr, code := runApp(t, args...); code != 0 || !strings.HasPrefix(out, "Transition finished: dual write off") {
		t.Fatalf("first finish: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	read := func() transition.State {
		t.Helper()
		state, stored, err := transition.ReadState(context.Background(), etcd.Client(), "/registry")
		if err != nil || !stored {
			t.Fatalf("read state: stored %v, %v", stored, err)
		}
		return state
	}
	before := read()
	out, stderr, code := runApp(t, args...)
	if want := "Transition already finished: " + before.String() + "; nothing changed.\n"; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("second finish: exit %d, stdout %q, stderr %q; want it to start with %q", code, out, stderr, want)
	}
	if diff := cmp.Diff(before, read()); diff != "" {
		t.Errorf("a second finish rewrote the state (-before +after):\n%s", diff)
	}

	// The form with the flags before the action still works, and with
	// -o json standard output holds the JSON document only.
	out, stderr, code = runApp(t, "transition", "--etcd-servers", etcd.Endpoints()[0], "finish", "--force", "-o", "json")
	if code != 0 || !strings.HasPrefix(out, "{") || !strings.HasPrefix(stderr, "Transition already finished") {
		t.Errorf("transition --etcd-servers E finish -o json: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
