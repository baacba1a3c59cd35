package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
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
