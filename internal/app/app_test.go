package app

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func runApp(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
	return out.String(), errOut.String(), code
}

func TestVersion(t *testing.T) {
	out, _, code := runApp(t, "version")
	if code != 0 || !strings.HasPrefix(out, "allocator ") || strings.Contains(out, "$Format") || !strings.Contains(out, "Kubernetes API v1.37.") {
		t.Fatalf("version: code %d, output %q", code, out)
	}
	out, _, code = runApp(t, "version", "-o", "json")
	var info struct {
		Version    string
		Kubernetes struct{ GitVersion string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &info) != nil || info.Version == "" || !strings.HasPrefix(info.Kubernetes.GitVersion, "v1.37.") {
		t.Fatalf("version -o json: code %d, output %q", code, out)
	}
	out, _, code = runApp(t, "version", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "kubernetes:\n") || !strings.Contains(out, "  gitVersion: v1.37.") {
		t.Fatalf("version -o yaml: code %d, output %q", code, out)
	}
	out, _, code = runApp(t, "version", "-o", "jsonpath={.kubernetes.gitVersion}")
	if code != 0 || !strings.HasPrefix(out, "v1.37.") || strings.Count(out, "\n") != 1 {
		t.Fatalf("version -o jsonpath: code %d, output %q", code, out)
	}
	out, _, code = runApp(t, "version", "-o", "go-template={{.kubernetes.gitVersion}}")
	if code != 0 || !strings.HasPrefix(out, "v1.37.") || strings.Contains(out, "\n") {
		t.Fatalf("version -o go-template: code %d, output %q", code, out)
	}
	for _, bad := range []string{"xml", "jsonpath={.kubernetes", "go-template={{.kubernetes"} {
		if _, errOut, code := runApp(t, "version", "-o", bad); code == 0 || !strings.Contains(errOut, bad) || strings.Contains(errOut, "use  or") {
			t.Fatalf("version -o %s: code %d, stderr %q", bad, code, errOut)
		}
	}
}

// TestVersionFlag: --version prints what the version command prints.
func TestVersionFlag(t *testing.T) {
	want, _, _ := runApp(t, "version")
	if got, stderr, code := runApp(t, "--version"); code != 0 || got != want {
		t.Errorf("--version: exit %d, stdout %q, stderr %q; want %q", code, got, stderr, want)
	}
}

func TestUnknownCommand(t *testing.T) {
	if _, errOut, code := runApp(t, "frobnicate"); code == 0 || !strings.Contains(errOut, "unknown command") {
		t.Fatalf("unknown command: code %d, stderr %q", code, errOut)
	}
}

func TestUsageErrorsPointAtHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "Run 'allocator --help' for usage."},
		{[]string{"serve", "--no-such-flag"}, "Run 'allocator serve --help' for usage."},
	}
	for _, tt := range tests {
		_, errOut, code := runApp(t, tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: code %d, stderr %q, want %q", tt.args, code, errOut, tt.want)
		}
	}
	// Errors that are not about the command line get no hint.
	if _, errOut, _ := runApp(t, "version", "-o", "xml"); strings.Contains(errOut, "--help") {
		t.Errorf("version -o xml hints at --help: %q", errOut)
	}
}

func TestRepairIntervalRejected(t *testing.T) {
	for _, value := range []string{"0", "-5s"} {
		_, errOut, code := runApp(t, "serve", "--repair-interval", value, "--data-dir", t.TempDir())
		if code != 1 || !strings.Contains(errOut, "--repair-interval") || !strings.Contains(errOut, "must be a positive duration") {
			t.Errorf("--repair-interval %s: code %d, stderr %q", value, code, errOut)
		}
	}
	if _, errOut, code := runApp(t, "repair", "--interval", "-1m", "--kubeconfig", "/nonexistent"); code != 1 || !strings.Contains(errOut, "--interval -1m0s: must be positive") {
		t.Errorf("repair --interval -1m: code %d, stderr %q", code, errOut)
	}
}

func TestLoggingFlags(t *testing.T) {
	if _, errOut, code := runApp(t, "-v", "0", "version"); code != 0 {
		t.Fatalf("-v: code %d, stderr %q", code, errOut)
	}
	if _, errOut, code := runApp(t, "version", "--logging-format", "yaml"); code != 1 || !strings.Contains(errOut, "logging options") {
		t.Fatalf("--logging-format yaml: code %d, stderr %q", code, errOut)
	}
}

// TestCompletion: `allocator completion bash` prints a bash completion
// script for the command tree, as the README says.
func TestCompletion(t *testing.T) {
	out, errOut, code := runApp(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "bash completion V2 for allocator") || !strings.Contains(out, "__start_allocator") {
		t.Fatalf("completion bash: exit %d, stderr %q, output starts %q", code, errOut, out[:min(len(out), 200)])
	}
}

// TestPluginCompletion: linked as kubectl_complete-allocator, the binary
// answers `kubectl allocator <TAB>` with the plugin's commands and their
// flags, in cobra's completion format (candidates, then ":<directive>").
func TestPluginCompletion(t *testing.T) {
	tests := []struct {
		args       []string
		want, nope []string
	}{
		{[]string{""}, []string{"status", "repair", "migrate", "renumber", "version"}, []string{"serve", "transition"}},
		{[]string{"st"}, []string{"status"}, []string{"repair"}},
		{[]string{"status", "--con"}, []string{"--context"}, nil},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), append([]string{"/usr/local/bin/" + CompletionName}, tt.args...), Streams{Out: &out, Err: &errOut})
		got := out.String()
		if code != 0 || !strings.Contains(got, "\n:") {
			t.Errorf("%v: exit %d, output %q, stderr %q; want cobra's completion answer", tt.args, code, got, errOut.String())
			continue
		}
		lines := strings.Split(got, "\n")
		for _, w := range tt.want {
			if !slices.ContainsFunc(lines, func(l string) bool { return l == w || strings.HasPrefix(l, w+"\t") }) {
				t.Errorf("%v: no candidate %q in %q", tt.args, w, got)
			}
		}
		for _, n := range tt.nope {
			if slices.ContainsFunc(lines, func(l string) bool { return l == n || strings.HasPrefix(l, n+"\t") }) {
				t.Errorf("%v: candidate %q, which the plugin does not have, in %q", tt.args, n, got)
			}
		}
	}
}
