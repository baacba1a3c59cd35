package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/repair/report"
)

// cronJobRange is the servers' --service-cluster-ip-range; extraCIDR is a
// ServiceCIDR beyond it, which the bitmap cannot hold.
const (
	cronJobRange = "10.0.0.0/24"
	extraCIDR    = "10.1.0.0/24"
)

// TestRepairCronJobGreen runs the command of deploy/repair-cronjob.yaml (the
// real binary, `repair --model=auto`) against a healthy cluster of each
// history, a real `allocator serve` on a real etcd, each cluster serving a
// ServiceCIDR beyond --service-cluster-ip-range with a Service in it. It
// must exit 0 and say on stderr which model it picked and why:
//
//   - fresh: an IPAddress-model cluster that never had a bitmap; then with
//     the findings left by design (a Service outside its scope after its
//     namespace was relabelled, an IPAddress made by hand), still exit 0,
//     each with what clears it; then with a duplicate ClusterIP, exit 2;
//   - upgraded from the bitmap: the bitmap model first, then the IPAddress
//     model on the same etcd (maps present, dual write on);
//   - transitioned and finished: as upgraded, then `allocator transition
//     finish` and Services created and deleted after it (the retired
//     bitmap is stale).
//
// For the two histories with a bitmap, the bitmap's repair (`--model
// bitmap --dry-run`) is run too: it fails (exit 2), which is what auto
// must not pick.
func TestRepairCronJobGreen(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts server processes")
	}
	bin := buildBinary(t)
	t.Run("fresh", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, bin, etcdtest.New(t), 1, "--service-cluster-ip-range", cronJobRange)
		ep := f.start(f.replicas[0], "ipaddress")
		healthyServices(t, ep.client, "fresh")
		expectGreen(t, f, "etcd holds no ClusterIP RangeAllocation", 0)
		testByDesign(t, f, ep.client)
	})
	t.Run("upgraded-from-bitmap", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, bin, etcdtest.New(t), 1, "--service-cluster-ip-range", cronJobRange)
		r := f.replicas[0]
		ep := f.start(r, "bitmap")
		createServices(t, ep.client, "default", "before", 4)
		f.stop(r, syscall.SIGTERM)
		ep = f.start(r, "ipaddress")
		healthyServices(t, ep.client, "after")
		if state := transitionState(t, f); !state.DualWrite {
			t.Fatalf("transition state after the upgrade: %v; want dual write on", state)
		}
		expectGreen(t, f, "every live replica runs the IPAddress model", 0)
		expectBitmapFails(t, f, report.TypeOutOfRange)
	})
	t.Run("transitioned-and-finished", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t, bin, etcdtest.New(t), 1, "--service-cluster-ip-range", cronJobRange)
		r := f.replicas[0]
		ep := f.start(r, "bitmap")
		createServices(t, ep.client, "default", "before", 4)
		f.stop(r, syscall.SIGTERM)
		ep = f.start(r, "ipaddress")
		if _, _, code := runCLI(t, bin, "transition", "finish", "--etcd-servers", f.endpoints(), "--kubeconfig", ep.kubeconfig); code != 0 {
			t.Fatalf("transition finish: exit %d", code)
		}
		if state := transitionState(t, f); state.DualWrite {
			t.Fatalf("transition state after finish: %v; want dual write off", state)
		}
		// A replica that has not seen the finish yet still releases a
		// deleted Service's bit.
		waitFinishAcknowledged(t, bin, []string{"--etcd-servers", f.endpoints(), "--kubeconfig", ep.kubeconfig}, 1)
		// The retired bitmap goes stale: a Service it holds is deleted,
		// new ones get no bit.
		if err := ep.client.CoreV1().Services("default").Delete(context.Background(), "before-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		healthyServices(t, ep.client, "after")
		expectGreen(t, f, "the bitmap is retired", 0)
		expectBitmapFails(t, f, report.TypeLeak)
	})
}

// healthyServices creates what a healthy cluster holds: ClusterIP Services,
// a NodePort one (the node-port map is repaired too), a ServiceCIDR beyond
// the flag's range and a Service in it.
func healthyServices(t *testing.T, client kubernetes.Interface, prefix string) {
	t.Helper()
	createServices(t, client, "default", prefix, 3)
	ctx := context.Background()
	np := newService(prefix + "-nodeport")
	np.Spec.Type = corev1.ServiceTypeNodePort
	if _, err := client.CoreV1().Services("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createServiceCIDR(t, client, "extra", nil, extraCIDR)
	createStatic(t, client, "default", prefix+"-extra", netip.MustParsePrefix(extraCIDR).Addr().Next().String())
}

func createServices(t *testing.T, client kubernetes.Interface, ns, prefix string, n int) {
	t.Helper()
	for i := range n {
		if _, err := client.CoreV1().Services(ns).Create(context.Background(), newService(fmt.Sprintf("%s-%d", prefix, i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func createServiceCIDR(t *testing.T, client kubernetes.Interface, name string, annotations map[string]string, cidr string) {
	t.Helper()
	obj := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}}}
	if _, err := client.NetworkingV1().ServiceCIDRs().Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createStatic creates a Service holding ip, retrying while the server's
// allocator has not seen the ServiceCIDR that holds ip yet.
func createStatic(t *testing.T, client kubernetes.Interface, ns, name, ip string) {
	t.Helper()
	svc := newService(name)
	svc.Spec.ClusterIP = ip
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("create Service %s/%s at %s: %v", ns, name, ip, last)
	}
}

func transitionState(t *testing.T, f *fleet) transition.State {
	t.Helper()
	state, stored, err := transition.ReadState(context.Background(), f.etcd.Client(), "/registry")
	if err != nil || !stored {
		t.Fatalf("transition state: stored %v, %v", stored, err)
	}
	return state
}

// cronJobArgs are the arguments of deploy/repair-cronjob.yaml's container
// against the test's cluster: --etcd-servers is the test's etcd, whose
// plain http needs none of the manifest's TLS files
// (TestManifestsStartOnANode runs them against a TLS etcd), and
// --kubeconfig stands for the pod's in-cluster config.
func cronJobArgs(t *testing.T, f *fleet) []string {
	t.Helper()
	p := readManifestPod(t, deployDir, "repair-cronjob.yaml", readImageConfig(t, dockerfile))
	args := slices.Clone(p.container.Args)
	if v, _ := flagValue(args, "--model"); len(args) == 0 || args[0] != "repair" || v != "auto" {
		t.Fatalf("repair-cronjob.yaml runs %v; this test is about `repair --model=auto`", args)
	}
	args = replaceFlag(args, "--etcd-servers", func(string) string { return f.endpoints() })
	args = slices.DeleteFunc(args, func(a string) bool {
		for _, flag := range []string{"--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"} {
			if strings.HasPrefix(a, flag+"=") {
				return true
			}
		}
		return false
	})
	for _, flag := range []string{"--etcd-cafile", "--etcd-certfile", "--etcd-keyfile"} {
		if _, ok := flagValue(args, flag); ok {
			t.Fatalf("repair-cronjob.yaml gives %s apart from its value; write it as %s=VALUE", flag, flag)
		}
	}
	return append(args, "--kubeconfig", f.mustPick().kubeconfig)
}

// runCronJob runs the CronJob's command once and returns its JSON report,
// its whole output and its exit code.
func runCronJob(t *testing.T, f *fleet, extra ...string) (report.Report, string, int) {
	t.Helper()
	stdout, output, code := runCLI(t, f.bin, append(cronJobArgs(t, f), extra...)...)
	var rep report.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("the CronJob's output is not a JSON report (exit %d): %v\n%s", code, err, output)
	}
	return rep, output, code
}

// expectGreen runs the CronJob's command and expects exit 0, the IPAddress
// model picked for the reason given (one line on stderr), and byDesign
// findings left by design, each with what clears it.
func expectGreen(t *testing.T, f *fleet, reason string, byDesign int) report.Report {
	t.Helper()
	rep, output, code := runCronJob(t, f)
	t.Logf("CronJob exit code: %d", code)
	line := "--model auto: the ipaddress model, because " + reason
	if code != 0 || rep.Model != "ipaddress" || !strings.Contains(output, line) {
		t.Errorf("CronJob: exit %d, model %q; want exit 0, the ipaddress model, and a line %q:\n%s", code, rep.Model, line, output)
	}
	if n := strings.Count(output, "--model auto:"); n != 1 {
		t.Errorf("the model is named in %d lines, want 1:\n%s", n, output)
	}
	if rep.Unresolved() != 0 || rep.LeftByDesign() != byDesign {
		t.Errorf("CronJob: %d unresolved, %d left by design; want 0 and %d: %+v", rep.Unresolved(), rep.LeftByDesign(), byDesign, rep.Problems)
	}
	for _, p := range rep.Problems {
		if p.Standing() == report.ByDesign && p.Clear == "" {
			t.Errorf("left by design without what clears it: %+v", p)
		}
	}
	return rep
}

// expectBitmapFails runs the bitmap model's repair as a dry run: it reports
// a problem of type typ and exits 2.
func expectBitmapFails(t *testing.T, f *fleet, typ string) {
	t.Helper()
	rep, _, code := runCronJob(t, f, "--model", "bitmap", "--dry-run")
	if code != 2 || !slices.ContainsFunc(rep.Problems, func(p report.Problem) bool { return p.Type == typ }) {
		t.Errorf("--model bitmap: exit %d, problems %+v; want exit 2 with a %s", code, rep.Problems, typ)
	}
}

// testByDesign adds to a healthy cluster the two findings left by design (a
// Service outside its scope, an IPAddress made by hand): the CronJob stays
// green. A duplicate ClusterIP then fails it (exit 2).
func testByDesign(t *testing.T, f *fleet, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"team": "a"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createServiceCIDR(t, client, "scope-a", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}, "10.2.0.0/28")
	createStatic(t, client, "team-a", "web", "10.2.0.5")
	ns.Labels["team"] = "z"
	if _, err := client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// In the range's lower band: a dynamic allocation takes from it only
	// once the upper band is full, and this cluster holds a handful of
	// Services, any of which may hold an address of the upper band.
	handMade := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: "10.0.0.10", Labels: map[string]string{ipaddress.LabelIPFamily: "IPv4"}},
		Spec:       networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "ghost"}},
	}
	if _, err := client.NetworkingV1().IPAddresses().Create(ctx, handMade, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rep := expectGreen(t, f, "etcd holds no ClusterIP RangeAllocation", 2)
	for ip, want := range map[string]string{"10.2.0.5": "kubectl label namespace team-a", "10.0.0.10": "kubectl delete ipaddress 10.0.0.10"} {
		i := slices.IndexFunc(rep.Problems, func(p report.Problem) bool { return p.IP == ip })
		if i < 0 || !strings.Contains(rep.Problems[i].Clear, want) {
			t.Errorf("finding about %s: %+v; want one whose clear says %q", ip, rep.Problems, want)
		}
	}

	// A duplicate is a real problem: written past the API, as a restore
	// or a bug would leave it.
	web, err := client.CoreV1().Services("default").Get(ctx, "fresh-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	plantService(t, f.etcd, "dup", web.Spec.ClusterIP)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Services("default").Get(ctx, "dup", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("the planted Service is never served")
	}
	rep, _, code := runCronJob(t, f)
	t.Logf("CronJob exit code with a duplicate ClusterIP: %d", code)
	if _, found := rep.Find(report.TypeDuplicate, web.Spec.ClusterIP); code != 2 || !found {
		t.Errorf("CronJob with a duplicate ClusterIP: exit %d, problems %+v; want exit 2 and the duplicate", code, rep.Problems)
	}
}
