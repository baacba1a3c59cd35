package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/allocator/allocator/internal/embedetcd"
	"github.com/allocator/allocator/internal/repairtest"
	"github.com/allocator/allocator/internal/testpki"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// jobEtcdUser is the etcd user of the repair Jobs' dedicated certificate:
// its CN, as deploy/repair-cronjob.yaml issues it.
const jobEtcdUser = "allocator-repair"

// TestRepairJobsWithTheirEtcdRole: with etcd's RBAC on, the commands the
// repair Jobs of deploy/ run (repair, migrate; and status and transition
// status, which an operator may run with the Jobs' certificate) succeed in
// the bitmap model, a repair write included, with a certificate of their own
// whose user has only the role deploy/repair-cronjob.yaml's comments grant;
// and that certificate can neither write a Service nor read a Secret.
func TestRepairJobsWithTheirEtcdRole(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	ca := testpki.NewCA(t, "etcd-ca")
	server := ca.Server(t, "etcd")
	// kube-apiserver's certificate, as kubeadm names it; our server stands
	// in for kube-apiserver and uses it.
	apiserver := ca.Client(t, "kube-apiserver-etcd-client")
	job := ca.Client(t, jobEtcdUser)
	pki := embedetcd.PKI{CAFile: ca.CertFile, ServerCertFile: server.CertFile, ServerKeyFile: server.KeyFile,
		ClientCertFile: apiserver.CertFile, ClientKeyFile: apiserver.KeyFile}
	c := startTestClusterWithPKI(t, bin, pki,
		[]string{"--allocator=bitmap", "--service-cluster-ip-range=10.96.0.0/24", "--repair-interval=1h"}, []string{"admin"})
	admin := etcdClient(t, c.etcd.Endpoints(), ca.CertFile, apiserver)
	enableEtcdAuth(t, admin, readJobRole(t))

	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	if err := os.WriteFile(kubeconfig, c.kubeconfig(t, "admin"), 0o600); err != nil {
		t.Fatal(err)
	}
	client, err := newClient(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := repairtest.Context(t)
	for _, name := range []string{"web", "db"} {
		if _, err := client.CoreV1().Services("default").Create(ctx, newService(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A Service stored without its bit, as a write around the allocator
	// leaves it: the repair must write the map to mark it. Its address is
	// in the /24's static band (the first 16), which dynamic allocation
	// leaves alone while the upper band has room: web and db cannot hold it.
	repairtest.PlantService(t, admin, "default", "planted", []string{"10.96.0.7"}, time.Now())
	mapKey := etcdlayout.Layout{}.PrimaryServiceIPRange()
	before := modRevision(t, admin, mapKey)

	etcdFlags := []string{"--kubeconfig", kubeconfig, "--etcd-servers", c.etcd.Endpoints()[0],
		"--etcd-cafile", ca.CertFile, "--etcd-certfile", job.CertFile, "--etcd-keyfile", job.KeyFile}
	for _, args := range [][]string{
		{"repair", "--model=auto", "--output=json"},
		{"status", "--model=bitmap"},
		{"migrate", "--to", "ipaddress", "--dry-run=false"},
		{"repair", "--model=bitmap", "--output=json"},
		{"migrate", "--to", "bitmap", "--dry-run=false"},
		{"transition", "status"},
	} {
		out, err := exec.Command(bin, append(args, etcdFlags...)...).CombinedOutput()
		if err != nil || strings.Contains(strings.ToLower(string(out)), "permission denied") {
			t.Errorf("allocator %s as etcd user %s: %v\n%s", strings.Join(args, " "), jobEtcdUser, err, tail(string(out), 20))
		}
	}
	if after := modRevision(t, admin, mapKey); after == before {
		t.Errorf("the repair left %s unwritten (mod revision %d): the planted Service's bit was not marked", mapKey, after)
	}

	jobClient := etcdClient(t, c.etcd.Endpoints(), ca.CertFile, job)
	if _, err := jobClient.Put(ctx, etcdlayout.Layout{}.Service("default", "web"), "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("etcd user %s wrote a Service: %v; want permission denied", jobEtcdUser, err)
	}
	if _, err := jobClient.Get(ctx, "/registry/secrets/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("etcd user %s read the Secrets: %v; want permission denied", jobEtcdUser, err)
	}
}

// etcdPermission is one `etcdctl role grant-permission` of the Jobs' role.
type etcdPermission struct {
	typ    authpb.Permission_Type
	prefix string
}

// readJobRole reads the grants of the Jobs' etcd role from the comments of
// deploy/repair-cronjob.yaml, as an operator copies them.
func readJobRole(t *testing.T) []etcdPermission {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, "repair-cronjob.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	grant := regexp.MustCompile(`(?m)^#\s+etcdctl role grant-permission ` + jobEtcdUser + ` --prefix=true (read|write|readwrite) (\S+)$`)
	var perms []etcdPermission
	for _, m := range grant.FindAllStringSubmatch(string(data), -1) {
		perms = append(perms, etcdPermission{typ: authpb.Permission_Type(authpb.Permission_Type_value[strings.ToUpper(m[1])]), prefix: m[2]})
	}
	if len(perms) == 0 {
		t.Fatal("deploy/repair-cronjob.yaml grants the Jobs' etcd role nothing")
	}
	return perms
}

// enableEtcdAuth turns etcd's RBAC on as docs/operations.md does: the user
// root, kube-apiserver's user with the root role, and the Jobs' user with a
// role of perms; c is kube-apiserver's client.
func enableEtcdAuth(t *testing.T, c *clientv3.Client, perms []etcdPermission) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noPassword := &clientv3.UserAddOptions{NoPassword: true}
	apiserverUser := "kube-apiserver-etcd-client"
	steps := []func() error{
		func() error { _, err := c.UserAddWithOptions(ctx, "root", "", noPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := c.UserAddWithOptions(ctx, apiserverUser, "", noPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, apiserverUser, "root"); return err },
		func() error { _, err := c.RoleAdd(ctx, jobEtcdUser); return err },
	}
	for _, p := range perms {
		steps = append(steps, func() error {
			_, err := c.RoleGrantPermission(ctx, jobEtcdUser, p.prefix, clientv3.GetPrefixRangeEnd(p.prefix), clientv3.PermissionType(p.typ))
			return err
		})
	}
	steps = append(steps,
		func() error { _, err := c.UserAddWithOptions(ctx, jobEtcdUser, "", noPassword); return err },
		func() error { _, err := c.UserGrantRole(ctx, jobEtcdUser, jobEtcdUser); return err },
		func() error { _, err := c.AuthEnable(ctx); return err },
	)
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth, step %d: %v", i, err)
		}
	}
}

// etcdClient is a client of the etcd at endpoints with the certificate pair.
func etcdClient(t *testing.T, endpoints []string, caFile string, pair testpki.Pair) *clientv3.Client {
	t.Helper()
	tlsConfig, err := embedetcd.PKI{CAFile: caFile, ClientCertFile: pair.CertFile, ClientKeyFile: pair.KeyFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsConfig, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func modRevision(t *testing.T, c *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v (%d keys)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].ModRevision
}
