package app

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/allocator/allocator/internal/testserver"
)

// TestRerunLine: the resume line repeats the flags given, in a form a
// shell takes back, as the plugin when run as one, and never echoes a
// bearer token.
func TestRerunLine(t *testing.T) {
	var got string
	root := newRootCommand(Streams{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}, true)
	migrate, _, err := root.Find([]string{"migrate"})
	if err != nil {
		t.Fatal(err)
	}
	migrate.RunE = func(cmd *cobra.Command, _ []string) error { got = rerunLine(cmd); return nil }
	root.SetArgs([]string{"migrate", "--to", "bitmap", "--etcd-servers", "https://127.0.0.1:1,https://127.0.0.1:2",
		"--kubeconfig", "/tmp/a b/kc", "--token", "s3cret", "--context", "prod"})
	if err := root.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "kubectl allocator migrate --context=prod --etcd-servers=https://127.0.0.1:1,https://127.0.0.1:2 --kubeconfig='/tmp/a b/kc' --to=bitmap --token='<hidden>'"
	if got != want {
		t.Errorf("rerunLine:\n got %s\nwant %s", got, want)
	}
}

// TestRepairProgress: repair --progress prints the IPAddress model's pass
// over the addresses as plain lines on a stream that is not a terminal.
func TestRepairProgress(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress"})
	out, errOut, code := runApp(t, "repair", "--kubeconfig", srv.KubeconfigPath, "--model", "ipaddress", "--progress")
	if code != 0 || !strings.Contains(out, "ipaddress repair: 1 service") {
		t.Fatalf("repair: exit %d\n%s%s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^addresses checked: 1/1 done in \S+$`).MatchString(errOut) || strings.ContainsAny(errOut, "\r\x1b") {
		t.Errorf("repair --progress stderr: %q", errOut)
	}
	if _, errOut, _ := runApp(t, "repair", "--kubeconfig", srv.KubeconfigPath, "--model", "ipaddress"); errOut != "" {
		t.Errorf("repair without --progress printed to stderr: %q", errOut)
	}
}
