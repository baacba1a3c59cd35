package integration

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
)

// TestDelegatedAuthThroughKubeAPIServer runs a real kube-apiserver with
// --authorization-mode RBAC (the binary named by KUBE_APISERVER_BIN, e.g.
// one built by hack/lib/kube-apiserver-build.sh; skipped without it) and our
// server with --authentication-kubeconfig and --authorization-kubeconfig
// pointing at it: a user kube-apiserver knows only by a token, whom its RBAC
// lets create Services, creates one through our server (TokenReview, then
// SubjectAccessReview); a user without the grant gets 403; an unknown token
// 401.
func TestDelegatedAuthThroughKubeAPIServer(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("KUBE_APISERVER_BIN")
	if bin == "" {
		t.Skip("KUBE_APISERVER_BIN is not set (a kube-apiserver binary, e.g. from hack/lib/kube-apiserver-build.sh v1.33.13)")
	}
	ctx := testContext(t)
	dir := t.TempDir()
	token := func() string {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(b)
	}
	admin, alice, bob, delegator := token(), token(), token(), token()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens := write("tokens.csv", fmt.Sprintf("%s,admin,admin,system:masters\n%s,alice,alice,developers\n%s,bob,bob,developers\n%s,system:allocator,system:allocator,\n",
		admin, alice, bob, delegator))
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey := write("sa.key", string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	saPub := write("sa.pub", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))

	etcd := etcdtest.New(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	kasCtx, stopKAS := context.WithCancel(context.Background())
	cmd := exec.CommandContext(kasCtx, bin, "--etcd-servers", etcd.Endpoints()[0], "--authorization-mode", "RBAC",
		"--token-auth-file", tokens, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--endpoint-reconciler-type", "none", "--secure-port", strconv.Itoa(port), "--cert-dir", filepath.Join(dir, "kas-certs"),
		"--service-cluster-ip-range", "10.96.0.0/24", "--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey)
	kasLog, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer kasLog.Close()
	cmd.Stdout, cmd.Stderr = kasLog, kasLog
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() { stopKAS(); _ = cmd.Wait() })

	kasURL := "https://127.0.0.1:" + strconv.Itoa(port)
	kasConfig := func(tok string) *rest.Config {
		return &rest.Config{Host: kasURL, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	}
	kas, err := kubernetes.NewForConfig(kasConfig(admin))
	if err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := kas.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	}); err != nil {
		log, _ := os.ReadFile(kasLog.Name())
		t.Fatalf("kube-apiserver not ready: %v; log tail: %s", err, tail(string(log), 2000))
	}
	for _, obj := range []struct {
		role    *rbacv1.ClusterRole
		binding *rbacv1.ClusterRoleBinding
	}{{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "service-creator"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"create", "get", "list"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-creates-services"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "service-creator"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}}},
	}, {
		nil,
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "allocator-auth-delegator"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:allocator"}}},
	}} {
		if obj.role != nil {
			if _, err := kas.RbacV1().ClusterRoles().Create(ctx, obj.role, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := kas.RbacV1().ClusterRoleBindings().Create(ctx, obj.binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The front-proxy CA and headers are read from
	// kube-system/extension-apiserver-authentication, as deploy/serve-rbac.yaml allows.
	if _, err := kas.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "allocator-authentication-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:allocator"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	delegatorKubeconfig := write("delegator.kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: kas, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: allocator, user: {token: %q}}]
contexts: [{name: kas, context: {cluster: kas, user: allocator}}]
current-context: kas
`, kasURL, delegator))

	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.97.0.0/24", Flags: func(o *apiserver.Options) {
		o.Security.Authentication.RemoteKubeConfigFile = delegatorKubeconfig
		o.Security.Authorization.RemoteKubeConfigFile = delegatorKubeconfig
	}})
	as := func(tok string) kubernetes.Interface {
		cfg := rest.AnonymousClientConfig(srv.RESTConfig)
		cfg.BearerToken = tok
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// RBAC reaches kube-apiserver's authorizer through an informer; allow
	// it a moment (and our server caches a denial for 10 s, so poll slowly).
	err = wait.PollUntilContextTimeout(ctx, time.Second, 40*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := as(alice).CoreV1().Services("default").Create(ctx, clusterIPService("by-alice"), metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("alice, allowed by kube-apiserver's RBAC, could not create a Service through our server: %v", err)
	}
	_, err = as(bob).CoreV1().Services("default").Create(ctx, clusterIPService("by-bob"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("bob, without a grant: want 403, got %v", err)
	}
	_, err = as("not-a-token").CoreV1().Services("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Fatalf("unknown token: want 401, got %v", err)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
