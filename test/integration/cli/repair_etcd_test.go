package cli_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/ipaddress"
)

// TestRepairReadsEtcd: the IPAddress model's repair job given etcd reads the
// objects from etcd instead of listing them through the API server (the
// IPAddress pass taking the Services the node-port pass read), and finds
// what the job without etcd finds (a Service whose IPAddress is gone, a
// leaked IPAddress, two Services on one address and on one node port
// written straight to etcd), then fixes the missing IPAddress as the job
// without etcd does.
func TestRepairReadsEtcd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress", Etcd: etcd})
	services := srv.Client.CoreV1().Services("default")
	var created []*corev1.Service
	for _, name := range []string{"a", "b", "c"} {
		svc, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created = append(created, svc)
	}
	ipas := srv.Client.NetworkingV1().IPAddresses()
	if err := ipas.Delete(ctx, created[1].Spec.ClusterIP, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// In the static band (10.0.0.1-16), which the three creates above,
	// picking from the upper band, never reach: an address of the upper
	// band could be one of theirs, and the create would then fail.
	leak := ipaddress.NewObject(netip.MustParseAddr("10.0.0.10"), allocation.Owner{Namespace: "default", Name: "gone", UID: "u-gone"})
	if _, err := ipas.Create(ctx, leak, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	np, err := services.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "np"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Written straight to etcd: a second holder of a's address, and of
	// np's address and node port.
	for _, dup := range []*corev1.Service{created[0].DeepCopy(), np.DeepCopy()} {
		dup.Name, dup.UID, dup.ResourceVersion = dup.Name+"-dup", types.UID("u-"+dup.Name+"-dup"), ""
		data, err := etcdlayout.Encode(dup)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Client().Put(ctx, etcdlayout.Layout{Prefix: "/registry"}.Service("default", dup.Name), string(data)); err != nil {
			t.Fatal(err)
		}
	}

	base := []string{"repair", "--kubeconfig", srv.KubeconfigPath, "--model", "ipaddress", "-o", "json"}
	withEtcd := append(slices.Clone(base), "--etcd-servers", strings.Join(etcd.Endpoints(), ","))
	viaAPI := repairProblems(t, append(slices.Clone(base), "--dry-run"))
	viaEtcd := repairProblems(t, append(slices.Clone(withEtcd), "--dry-run"))
	// Without etcd the job has no node-port pass: the node-port map is in etcd.
	clusterIPs := slices.DeleteFunc(slices.Clone(viaEtcd), func(p string) bool { return strings.HasPrefix(p, "Port") })
	if diff := cmp.Diff(viaAPI, clusterIPs); diff != "" {
		t.Errorf("ClusterIP problems found (-through the API +from etcd):\n%s", diff)
	}
	for _, want := range []string{"ClusterIPNotAllocated " + created[1].Spec.ClusterIP, " 10.0.0.10 ",
		"ClusterIPAlreadyAllocated " + created[0].Spec.ClusterIP, "ClusterIPAlreadyAllocated " + np.Spec.ClusterIP,
		"PortAlreadyAllocated " + strconv.Itoa(int(np.Spec.Ports[0].NodePort))} {
		if !slices.ContainsFunc(viaEtcd, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem %q among %q", want, viaEtcd)
		}
	}

	repairProblems(t, withEtcd)
	if _, err := ipas.Get(ctx, created[1].Spec.ClusterIP, metav1.GetOptions{}); err != nil {
		t.Errorf("after the repair reading etcd, Service b's IPAddress: %v", err)
	}
}

// repairProblems runs the repair job and returns its problems, each as
// "reason ip service".
func repairProblems(t *testing.T, args []string) []string {
	t.Helper()
	out, errOut, code := runApp(t, args...)
	if code != 0 && code != 2 {
		t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
	}
	var rep struct {
		Problems []struct{ Type, Reason, IP, Service string }
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	var problems []string
	for _, p := range rep.Problems {
		problems = append(problems, strings.Join([]string{p.Reason, p.IP, p.Service, p.Type}, " "))
	}
	slices.Sort(problems)
	return problems
}
