package servicecidr_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/rangeusage"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
)

// seenBound is how long a replica may take to apply a lifecycle change
// written through another replica: one etcd watch event into its watch
// cache, read by its ServiceCIDR informer in process, whose handler marks
// the ranges stale for the next pick to apply (design.md §11). It takes milliseconds; the bound leaves room
// for a loaded machine.
const seenBound = 2 * time.Second

// refusesAsDraining reports whether a dry-run create asking for ip through
// c is refused because ip's ServiceCIDR drains.
func refusesAsDraining(ctx context.Context, c kubernetes.Interface, ip string) bool {
	_, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService("probe", ip),
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return apierrors.IsInvalid(err) && strings.Contains(err.Error(), "draining")
}

type created struct {
	name  string
	start time.Time
	ip    netip.Addr
}

// TestDrainUnderConcurrentCreates: three replicas on one etcd create
// Services while a ServiceCIDR they allocate from is annotated draining
// through one of them. Every replica applies it within seenBound (a
// dry-run static request for one of its addresses is refused, naming it);
// no create started after every replica applied it gets an address from
// it; the Services it holds keep their addresses and can be updated; a new
// static request inside it is refused with 422; status counts its Services.
func TestDrainUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A /28 default range (13 addresses after default/kubernetes) fills
	// first; "old" then serves (created in the same second as "spare", it
	// comes first by name), "spare" once "old" drains.
	first := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/28", Model: "ipaddress"})
	replicas := []*testserver.Server{first}
	for range 2 {
		replicas = append(replicas, testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/28", Model: "ipaddress", Etcd: first.Etcd}))
	}
	for _, name := range []string{"old", "spare"} {
		cidr := map[string]string{"old": "10.1.0.0/24", "spare": "10.2.0.0/24"}[name]
		if _, err := createServiceCIDR(ctx, first.Client, name, []string{cidr}); err != nil {
			t.Fatal(err)
		}
	}
	oldPrefix := netip.MustParsePrefix("10.1.0.0/24")
	for i, r := range replicas {
		poll(ctx, t, 30*time.Second, fmt.Sprintf("replica %d serves old and spare", i), func() (bool, error) {
			for _, ip := range []string{"10.1.0.254", "10.2.0.254"} {
				if _, err := r.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService("probe", ip),
					metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					return false, err
				}
			}
			return true, nil
		})
	}
	before := map[string]string{} // name → ClusterIP of the Services created before the drain
	inOld := 0
	for i := range 30 {
		svc, err := first.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService(fmt.Sprintf("before-%d", i), ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[svc.Name] = svc.Spec.ClusterIP
		if oldPrefix.Contains(netip.MustParseAddr(svc.Spec.ClusterIP)) {
			inOld++
		}
	}
	if inOld < 10 {
		t.Fatalf("%d of 30 Services got an address of old, want at least 10: the test does not drain a range in use", inOld)
	}

	records, allSeen := drainWhileCreating(ctx, t, replicas, "old", "10.1.0.253")
	after, fromOld := 0, 0
	for _, rec := range records {
		if oldPrefix.Contains(rec.ip) {
			fromOld++
		}
		if rec.start.After(allSeen) {
			after++
			if oldPrefix.Contains(rec.ip) {
				t.Errorf("%s started %v after every replica applied the drain and got %s of the draining ServiceCIDR",
					rec.name, rec.start.Sub(allSeen), rec.ip)
			}
		}
	}
	t.Logf("%d creates, %d from old (all before the drain applied), %d started after every replica applied it", len(records), fromOld, after)
	if after < 20 {
		t.Fatalf("only %d creates started after the drain was applied everywhere: the test checked too little", after)
	}
	checkDrainedServices(ctx, t, replicas, before, oldPrefix)
}

// drainWhileCreating runs two creating workers per replica, annotates
// ServiceCIDR name draining through the first replica once 20 Services
// exist, and measures when each replica refuses probeIP (inside it) as
// draining. The workers go on until afterDrain creates have started after
// the last replica applied the drain (or each has made maxPerWorker, all
// the ranges hold), so the check after the drain does not depend on how
// fast the creates ran before it. It returns every create and the moment
// the last replica applied the drain; a replica slower than seenBound
// fails the test.
func drainWhileCreating(ctx context.Context, t *testing.T, replicas []*testserver.Server, name, probeIP string) ([]created, time.Time) {
	t.Helper()
	const (
		maxPerWorker = 60 // 360 creates at most: the default /28, old and spare hold more
		afterDrain   = 40
	)
	var (
		mu       sync.Mutex
		records  []created
		count    atomic.Int64
		drained  atomic.Int64 // the last replica's apply, in UnixNano; 0 before
		after    atomic.Int64 // creates started after it
		stop     = make(chan struct{})
		stopOnce sync.Once
		wg       sync.WaitGroup
	)
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	defer halt()
	for r, srv := range replicas {
		for w := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range maxPerWorker {
					select {
					case <-stop:
						return
					default:
					}
					svcName := fmt.Sprintf("r%d-w%d-%d", r, w, i)
					start := time.Now()
					svc, err := srv.Client.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService(svcName, ""), metav1.CreateOptions{})
					if err != nil {
						t.Errorf("create %s: %v", svcName, err)
						return
					}
					count.Add(1)
					if d := drained.Load(); d != 0 && start.UnixNano() > d && after.Add(1) >= afterDrain {
						halt()
					}
					mu.Lock()
					records = append(records, created{name: svcName, start: start, ip: netip.MustParseAddr(svc.Spec.ClusterIP)})
					mu.Unlock()
				}
			}()
		}
	}
	poll(ctx, t, time.Minute, "20 Services created", func() (bool, error) { return count.Load() >= 20, nil })
	written := time.Now()
	if _, err := annotate(ctx, replicas[0].Client, name, lifecycle.DrainingAnnotation, ptr("true")); err != nil {
		t.Fatal(err)
	}
	allSeen := written
	for i, r := range replicas {
		var seen time.Time
		for deadline := written.Add(10 * seenBound); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if refusesAsDraining(ctx, r.Client, probeIP) {
				seen = time.Now()
				break
			}
		}
		switch lag := seen.Sub(written); {
		case seen.IsZero():
			t.Fatalf("replica %d never applied the drain within %v", i, 10*seenBound)
		case lag > seenBound:
			t.Errorf("replica %d applied the drain %v after the write, over the bound of %v", i, lag, seenBound)
		default:
			t.Logf("replica %d applied the drain within %v of the write", i, lag)
		}
		if seen.After(allSeen) {
			allSeen = seen
		}
	}
	drained.Store(allSeen.UnixNano())
	wg.Wait()
	return records, allSeen
}

// checkDrainedServices: the Services created before the drain keep their
// addresses, one inside the draining range is updated through another
// replica, a new Service asking for an address inside it gets 422, and
// status shows the range draining with the Services it holds.
func checkDrainedServices(ctx context.Context, t *testing.T, replicas []*testserver.Server, before map[string]string, oldPrefix netip.Prefix) {
	t.Helper()
	services := replicas[1].Client.CoreV1().Services(metav1.NamespaceDefault)
	var updated bool
	for name, ip := range before {
		svc, err := services.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP != ip {
			t.Errorf("%s: ClusterIP %s, had %s before the drain", name, svc.Spec.ClusterIP, ip)
		}
		if !updated && oldPrefix.Contains(netip.MustParseAddr(ip)) {
			svc.Labels = map[string]string{"touched": "yes"}
			got, err := services.Update(ctx, svc, metav1.UpdateOptions{})
			if err != nil || got.Spec.ClusterIP != ip {
				t.Errorf("update of %s inside the draining range: %v (ClusterIP %v)", name, err, got)
			}
			updated = true
		}
	}
	_, err := services.Create(ctx, clusterIPService("static-in-old", "10.1.0.252"), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `failed to allocate IP 10.1.0.252: 10.1.0.252 is in ServiceCIDR "old", which is draining`) {
		t.Errorf("static create inside the draining range: %v, want 422 naming old as draining", err)
	}

	usage, err := rangeusage.FromIPAddresses(ctx, replicas[0].Client)
	if err != nil {
		t.Fatal(err)
	}
	list, err := services.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var holders uint64
	for _, svc := range list.Items {
		if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && oldPrefix.Contains(ip) {
			holders++
		}
	}
	for _, c := range usage.CIDRs {
		if c.Prefix == oldPrefix && (c.Lifecycle != "draining" || c.Services != holders) {
			t.Errorf("status of old: lifecycle %q, %d Services; want draining, %d", c.Lifecycle, c.Services, holders)
		}
	}
}

// TestManualOnlyServesOnlyChosenAddresses: a manual-only ServiceCIDR never
// serves a dynamic pick, takes user-chosen addresses, refuses them while
// also draining, and serves dynamic picks once reopened. With every other
// range full, a dynamic create fails with kube-apiserver's "range is full"
// and a warning naming the manual-only ServiceCIDR.
func TestManualOnlyServesOnlyChosenAddresses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/28", Model: "ipaddress"})
	c, seen := warningClient(t, srv)
	services := c.CoreV1().Services(metav1.NamespaceDefault)
	if _, err := createServiceCIDR(ctx, c, "reserved", []string{"10.3.0.0/24"}, lifecycle.ManualOnlyAnnotation, "true"); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, 30*time.Second, "reserved served", func() (bool, error) {
		_, err := services.Create(ctx, clusterIPService("probe", "10.3.0.250"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, err
	})

	defaultRange := netip.MustParsePrefix("10.96.0.0/28")
	var full error
	picked := 0
	for i := 0; i < 20 && full == nil; i++ {
		svc, err := services.Create(ctx, clusterIPService(fmt.Sprintf("dyn-%d", i), ""), metav1.CreateOptions{})
		if err != nil {
			full = err
			break
		}
		picked++
		if ip := netip.MustParseAddr(svc.Spec.ClusterIP); !defaultRange.Contains(ip) {
			t.Errorf("dynamic %s got %s, outside the only automatic range", svc.Name, ip)
		}
	}
	if picked != 13 || full == nil || !strings.HasSuffix(full.Error(), "failed to allocate a serviceIP: range is full") {
		t.Fatalf("%d dynamic picks then %v; want 13, then kube-apiserver's range is full", picked, full)
	}
	if w := seen.take(); !containsAny(w, `"reserved" (10.3.0.0/24) is manual-only (user-chosen ClusterIPs only)`) {
		t.Errorf("warnings %q, want the hint naming reserved as manual-only", w)
	}
	if _, err := services.Create(ctx, clusterIPService("dns", "10.3.0.10"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("static create in the manual-only range: %v", err)
	}

	// Draining wins over manual-only; removing it leaves the range manual-only.
	if _, err := annotate(ctx, c, "reserved", lifecycle.DrainingAnnotation, ptr("true")); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, seenBound, "reserved draining", func() (bool, error) { return refusesAsDraining(ctx, c, "10.3.0.11"), nil })
	if _, err := annotate(ctx, c, "reserved", lifecycle.DrainingAnnotation, nil); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, seenBound, "reserved manual-only again", func() (bool, error) {
		_, err := services.Create(ctx, clusterIPService("ingress", "10.3.0.11"), metav1.CreateOptions{})
		return err == nil, err
	})
	if _, err := services.Create(ctx, clusterIPService("still-full", ""), metav1.CreateOptions{}); err == nil {
		t.Fatal("a dynamic create succeeded while the only range with room is manual-only")
	}

	// Reopened, it serves dynamic picks.
	if _, err := annotate(ctx, c, "reserved", lifecycle.ManualOnlyAnnotation, nil); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, seenBound, "a dynamic pick from the reopened range", func() (bool, error) {
		svc, err := services.Create(ctx, clusterIPService("reopened", ""), metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return netip.MustParsePrefix("10.3.0.0/24").Contains(netip.MustParseAddr(svc.Spec.ClusterIP)), nil
	})
}

// TestLifecycleIgnoredByBitmapModel: the bitmap model serves its flag's
// range whatever the ServiceCIDRs say, so it stores lifecycle annotations
// and warns that they have no effect on it.
func TestLifecycleIgnoredByBitmapModel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/24", Model: "bitmap"})
	c, seen := warningClient(t, srv)
	if _, err := annotate(ctx, c, "kubernetes", lifecycle.DrainingAnnotation, ptr("true")); err != nil {
		t.Fatal(err)
	}
	if w := seen.take(); !containsAny(w, "this server allocates in the bitmap model (--allocator=bitmap), which serves --service-cluster-ip-range only and ignores the lifecycle.allocator.github.io/ annotations") {
		t.Errorf("warnings %q, want the one saying the bitmap model ignores lifecycles", w)
	}
	if _, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService("static", "10.96.0.20"), metav1.CreateOptions{}); err != nil {
		t.Errorf("static create in the annotated range of the bitmap model: %v", err)
	}
}
