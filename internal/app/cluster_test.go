package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/allocator/allocator/internal/embedetcd"
)

// TestEtcdServersNeedScheme: every command with --etcd-servers refuses an
// entry without a scheme at once, in one line, before it reaches anything.
func TestEtcdServersNeedScheme(t *testing.T) {
	t.Parallel()
	const want = "error: --etcd-servers 127.0.0.1:2379: missing scheme; use http://127.0.0.1:2379 or https://127.0.0.1:2379\n"
	for _, args := range [][]string{
		{"serve", "--data-dir", t.TempDir()},
		{"status", "--kubeconfig", "/nonexistent"},
		{"repair", "--kubeconfig", "/nonexistent"},
		{"migrate", "--to", "bitmap", "--kubeconfig", "/nonexistent"},
		{"transition", "status"},
		{"transition", "finish", "--kubeconfig", "/nonexistent"},
		{"transition", "resume", "--kubeconfig", "/nonexistent"},
	} {
		args = append(args, "--etcd-servers", "127.0.0.1:2379")
		if _, stderr, code := runApp(t, args...); code != 1 || stderr != want {
			t.Errorf("%s: exit %d, stderr %q; want %q", strings.Join(args, " "), code, stderr, want)
		}
	}
}

// TestDataDirFillsEtcdFlags: --data-dir reads the embedded etcd's client URL
// and client certificate from what serve left in the data dir; a flag given
// wins over it, and a data dir without an embedded etcd says what to give.
func TestDataDirFillsEtcdFlags(t *testing.T) {
	t.Parallel()
	served := t.TempDir()
	pki, err := embedetcd.EnsurePKI(filepath.Join(served, etcdPKIDir))
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://127.0.0.1:23790"
	if err := os.WriteFile(filepath.Join(served, etcdURLsFile), []byte(`{"clientURL":"`+url+`","peerURL":"https://127.0.0.1:23800"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	noPKI := t.TempDir()
	if err := os.WriteFile(filepath.Join(noPKI, etcdURLsFile), []byte(`{"clientURL":"`+url+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		flags   clusterFlags
		want    clusterFlags
		wantErr string
	}{
		{name: "no data dir", flags: clusterFlags{}, want: clusterFlags{}},
		{name: "data dir alone", flags: clusterFlags{dataDir: served},
			want: clusterFlags{dataDir: served, etcdServers: []string{url}, etcdCAFile: pki.CAFile, etcdCertFile: pki.ClientCertFile, etcdKeyFile: pki.ClientKeyFile}},
		{name: "--etcd-servers wins", flags: clusterFlags{dataDir: served, etcdServers: []string{"https://10.0.0.1:2379"}},
			want: clusterFlags{dataDir: served, etcdServers: []string{"https://10.0.0.1:2379"}, etcdCAFile: pki.CAFile, etcdCertFile: pki.ClientCertFile, etcdKeyFile: pki.ClientKeyFile}},
		{name: "--etcd-cafile wins", flags: clusterFlags{dataDir: served, etcdCAFile: "/etc/ca.crt"},
			want: clusterFlags{dataDir: served, etcdServers: []string{url}, etcdCAFile: "/etc/ca.crt", etcdCertFile: pki.ClientCertFile, etcdKeyFile: pki.ClientKeyFile}},
		{name: "not a serve data dir", flags: clusterFlags{dataDir: t.TempDir()}, wantErr: "no embedded etcd recorded there"},
		{name: "no client certificate", flags: clusterFlags{dataDir: noPKI}, wantErr: "client certificate is not there"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.flags
			err := f.useDataDir()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("useDataDir: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, f, cmp.AllowUnexported(clusterFlags{}), cmpopts.IgnoreFields(clusterFlags{}, "overrides")); diff != "" {
				t.Errorf("flags (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNoEtcdSaysDataDir: a command that needs etcd and was given none says
// to pass --data-dir or --etcd-servers, not that the bitmap model needs it.
func TestNoEtcdSaysDataDir(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"transition", "status"},
		{"transition", "finish", "--kubeconfig", "/nonexistent"},
		{"transition", "resume", "--kubeconfig", "/nonexistent"},
	} {
		_, stderr, code := runApp(t, args...)
		if code != 1 || stderr != "error: "+errNoEtcd.Error()+"\n" || !strings.Contains(stderr, "--data-dir DIR") {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and %q", strings.Join(args, " "), code, stderr, errNoEtcd)
		}
	}
}
