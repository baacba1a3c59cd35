package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/listhold"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

func TestParseServiceCIDRs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "10.96.0.0/16", want: "10.96.0.0/16"},
		{in: "10.96.0.0/16,fd00:10:96::/112", want: "10.96.0.0/16,fd00:10:96::/112"},
		{in: "fd00::/112,10.0.0.0/24", want: "fd00::/112,10.0.0.0/24"},
		{in: "", wantErr: "want one CIDR or two"},
		{in: "10.0.0.0/24,10.1.0.0/24", wantErr: "one IPv4 and one IPv6"},
		{in: "10.0.0.1/24", wantErr: "host bits"},
		{in: "010.0.0.0/24", wantErr: "leading zeros"},
		{in: "a,b,c", wantErr: "want one CIDR or two"},
	}
	for _, tt := range tests {
		got, err := ParseServiceCIDRs(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: want error %q, got %v %v", tt.in, tt.wantErr, got, err)
			}
			continue
		}
		var texts []string
		for _, p := range got {
			texts = append(texts, p.String())
		}
		if err != nil || strings.Join(texts, ",") != tt.want {
			t.Errorf("%q: got %v %v", tt.in, texts, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	o := NewOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	o.Allocator, o.SecurePort, o.BindAddress, o.EtcdPrefix = "magic", 70000, "localhost", "registry"
	o.RepairInterval = -5 * time.Second
	o.EtcdCountMetricPollPeriod = -time.Minute
	o.EtcdCompactionInterval = -time.Second
	err := o.Validate()
	for _, want := range []string{"--allocator", "--secure-port", "--bind-address", "--etcd-prefix", "--repair-interval -5s", "--etcd-count-metric-poll-period -1m0s", "--etcd-compaction-interval -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error about %s, got %v", want, err)
		}
	}
}

func TestRangeForModel(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		rng     string
		model   model.Name
		wantErr string
	}{
		{"10.0.0.0/12", model.Bitmap, ""},
		{"10.0.0.0/8", model.Bitmap, "/12 or longer"},
		{"fd00::/108", model.Bitmap, ""},
		{"fd00::/64", model.Bitmap, "/108 or longer"},
		{"fd00::/64", model.IPAddress, ""},
		{"fd00::/48", model.IPAddress, "shortest allowed prefix length for service CIDR is 64, got 48"},
		{"10.0.0.0/8", model.IPAddress, ""},
		{"10.0.0.0/32", model.Bitmap, "no usable address"},
	} {
		o := NewOptions()
		o.ServiceClusterIPRange, o.Allocator = tt.rng, string(tt.model)
		err := o.Validate()
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s %s: want %q, got %v", tt.rng, tt.model, tt.wantErr, err)
		}
	}
}

func TestAdminKubeconfigReusesToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "admin.kubeconfig")
	tok1, err := ensureAdminKubeconfig(path, "https://127.0.0.1:1", ca)
	if err != nil {
		t.Fatal(err)
	}
	tok2, err := ensureAdminKubeconfig(path, "https://127.0.0.1:2", ca)
	if err != nil {
		t.Fatal(err)
	}
	if tok1 == "" || tok1 != tok2 {
		t.Fatalf("token not reused: %q %q", tok1, tok2)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil || cfg.Clusters[kubeconfigCluster].Server != "https://127.0.0.1:2" {
		t.Fatalf("kubeconfig %+v %v", cfg, err)
	}
}

// TestAuditLogWithoutPolicyWarns: an audit log without a policy records
// nothing, as on kube-apiserver; serve says so in one line.
func TestAuditLogWithoutPolicyWarns(t *testing.T) {
	t.Parallel()
	o := NewOptions()
	if w := o.Security.Warnings(); len(w) != 0 {
		t.Errorf("defaults warn: %v", w)
	}
	o.Security.Audit.LogOptions.Path = filepath.Join(t.TempDir(), "audit.log")
	w := o.Security.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "--audit-log-path is set without --audit-policy-file: no audit event is recorded") {
		t.Errorf("log without policy: %v", w)
	}
	o.Security.Audit.PolicyFile = "policy.yaml"
	if w := o.Security.Warnings(); len(w) != 0 {
		t.Errorf("log with policy warns: %v", w)
	}
}

// TestCheckEtcdServers: every entry of --etcd-servers is a URL with a
// scheme etcd's client dials; anything else is refused naming the entry.
func TestCheckEtcdServers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		servers []string
		wantErr string
	}{
		{servers: nil},
		{servers: []string{"http://127.0.0.1:2379"}},
		{servers: []string{"https://etcd-0.etcd:2379", "https://[::1]:2379"}},
		{servers: []string{"unix:///run/etcd.sock", "unixs://etcd.sock:0"}},
		{servers: []string{"127.0.0.1:2379"}, wantErr: "--etcd-servers 127.0.0.1:2379: missing scheme; use http://127.0.0.1:2379 or https://127.0.0.1:2379"},
		{servers: []string{"https://a:2379", "etcd-1:2379"}, wantErr: "--etcd-servers etcd-1:2379: missing scheme; use http://etcd-1:2379 or https://etcd-1:2379"},
		{servers: []string{"tcp://127.0.0.1:2379"}, wantErr: `--etcd-servers tcp://127.0.0.1:2379: scheme "tcp"; use http:// or https://`},
		{servers: []string{"https://"}, wantErr: "--etcd-servers https://: no host; use https://HOST:PORT"},
		{servers: []string{"http://127.0.0.1:port"}, wantErr: `--etcd-servers http://127.0.0.1:port: invalid port ":port" after host`},
		{servers: []string{""}, wantErr: `--etcd-servers "": empty entry`},
	} {
		err := CheckEtcdServers(tt.servers)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%q: %v", tt.servers, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: got %v, want one line starting %q", tt.servers, err, tt.wantErr)
		}
	}
	o := NewOptions()
	o.EtcdServers = []string{"127.0.0.1:2379"}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--etcd-servers 127.0.0.1:2379: missing scheme") {
		t.Errorf("Validate does not check --etcd-servers: %v", err)
	}
}

// TestUnauthorizedIdentitiesWarn: when identities other than the generated
// admin can authenticate and no --authorization-kubeconfig decides what
// they may do, serve says so in one line naming the flags.
func TestUnauthorizedIdentitiesWarn(t *testing.T) {
	t.Parallel()
	const want = "--authorization-kubeconfig is not set: every identity that %s authenticates may do everything on this server"
	cases := []struct {
		name  string
		set   func(o *SecurityOptions)
		flags string // "" no warning
	}{
		{name: "the admin only", set: func(*SecurityOptions) {}},
		{name: "token file", set: func(o *SecurityOptions) { o.TokenAuthFile = "tokens.csv" }, flags: "--token-auth-file"},
		{name: "client CA and TokenReview", set: func(o *SecurityOptions) {
			o.Authentication.ClientCert.ClientCA = "ca.crt"
			o.Authentication.RemoteKubeConfigFile = "authn.kubeconfig"
		}, flags: "--client-ca-file, --authentication-kubeconfig"},
		{name: "front proxy", set: func(o *SecurityOptions) { o.Authentication.RequestHeader.ClientCAFile = "front.crt" }, flags: "--requestheader-client-ca-file"},
		{name: "authorized", set: func(o *SecurityOptions) {
			o.TokenAuthFile = "tokens.csv"
			o.Authorization.RemoteKubeConfigFile = "authz.kubeconfig"
		}},
	}
	for _, tc := range cases {
		o := NewSecurityOptions()
		tc.set(o)
		w := o.Warnings()
		switch {
		case tc.flags == "" && len(w) != 0:
			t.Errorf("%s: warns %q", tc.name, w)
		case tc.flags != "" && (len(w) != 1 || !strings.HasPrefix(w[0], fmt.Sprintf(want, tc.flags))):
			t.Errorf("%s: warns %q, want one line naming %s", tc.name, w, tc.flags)
		}
	}
}

// TestCompactionInterval: --etcd-compaction-interval reaches the stores as
// kube-apiserver's does (0: no compaction), and a Config built without the
// flag compacts at the default.
func TestCompactionInterval(t *testing.T) {
	t.Parallel()
	stores := func(cfg *Config) time.Duration {
		s := &Server{listHolds: listhold.NewShared(&clientv3.Client{}, etcdlayout.Layout{}, "p", listhold.NewHolds(listhold.Limits{}, nil), 0)}
		getter := &restOptionsGetter{stores: &etcdStores{}}
		CompletedConfig{&completedConfig{Config: cfg}}.holdLists(s, getter)
		return getter.base.CompactionInterval
	}
	for _, tt := range []struct {
		flag, stores time.Duration
	}{
		{flag: 0, stores: 0},
		{flag: time.Second, stores: time.Second},
		{flag: DefaultCompactionInterval, stores: DefaultCompactionInterval},
	} {
		if got := stores(&Config{CompactionInterval: compactionInterval(tt.flag)}); got != tt.stores {
			t.Errorf("--etcd-compaction-interval %v: the stores compact every %v, want %v", tt.flag, got, tt.stores)
		}
	}
	if got := stores(&Config{}); got != DefaultCompactionInterval {
		t.Errorf("a Config without an interval: the stores compact every %v, want %v", got, DefaultCompactionInterval)
	}
}
