package fault

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/apiserver"
	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/faultproxy"
	"github.com/allocator/allocator/internal/invariants"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// TestLostDeleteReleases: a NodePort Service's delete whose answer is lost
// (the client gives up after 1.5 s while every byte naming the Service
// reaches etcd 4 s late) is applied later; the server learns that through
// the request's fence and releases the Service's ClusterIP and node port,
// as for any delete, without waiting for a repair. In both models, on a
// server whose only etcd endpoint is the proxy.
func TestLostDeleteReleases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers; not in -short")
	}
	for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
		t.Run(string(m), func(t *testing.T) { lostDelete(t, m) })
	}
}

// lostDelay is how late the chosen keys' bytes reach etcd. The slow client
// gives up after lostTimeout. The proxy delays a gRPC cancellation as long
// as the request it cancels, so etcd receives the cancellation about
// lostTimeout minus the time the server spent before the write after the
// write itself: that gap must stay wide enough, on a loaded machine, for etcd
// to apply the write before its stream is reset, or the write never lands and
// there is no lost answer to test.
const (
	lostDelay   = 4 * time.Second
	lostTimeout = 1500 * time.Millisecond
)

// lostSetup is a server of model m whose only etcd endpoint is a proxy, a
// client of etcd that bypasses it, and clients of the server: fast and
// slow (giving up after lostTimeout).
type lostSetup struct {
	proxy      *faultproxy.Proxy
	direct     *clientv3.Client
	fast, slow kubernetes.Interface
}

// startLost starts the server on a fault proxy; each of flags changes its
// options.
func startLost(t *testing.T, m model.Name, flags ...func(*apiserver.Options)) lostSetup {
	etcd := etcdtest.New(t)
	proxy := etcd.Proxy(t)
	s := testserver.Start(t, testserver.Options{
		Etcd:         etcd,
		Model:        string(m),
		ServiceRange: "10.96.0.0/24",
		Flags: func(o *apiserver.Options) {
			o.EtcdServers = []string{proxy.URL()}
			o.ServiceNodePortRange = nodePortRange
			for _, f := range flags {
				f(o)
			}
		},
	})
	direct, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Close() })
	return lostSetup{proxy: proxy, direct: direct,
		fast: clientWithTimeout(t, s.RESTConfig, fillTimeout), slow: clientWithTimeout(t, s.RESTConfig, lostTimeout)}
}

// lostAttempts bounds how often a scenario is tried until its write lands
// late. On a loaded machine the server may spend the client's whole timeout
// before it sends the write: then nothing reaches etcd, which is a correct
// outcome but not the one under test, and the scenario is tried again.
const lostAttempts = 3

// landWindow is how long after a faulted request its write may still land:
// the client's timeout, the delay, and a margin for etcd and the fence.
const landWindow = lostTimeout + lostDelay + 4*time.Second

// settled waits until etcd holds no Service named name and nothing is left
// reserved (no invariant broken, no leak), and reports true. If name is
// still stored after within, with everything it holds reserved and nothing
// leaked, the write removing it never landed: false. Once name is gone, what
// it held must be released within 30 s. Anything else fails the test.
func (l lostSetup) settled(ctx context.Context, t *testing.T, m model.Name, name string, within time.Duration) bool {
	t.Helper()
	layout := etcdlayout.Layout{}
	deadline := time.Now().Add(within)
	gone := false
	for {
		// Whether the Service is stored comes from the report's own
		// snapshot: read apart, a delete landing between the two reads
		// would pass for a Service gone with nothing left reserved.
		report, err := invariants.Check(ctx, l.direct, layout, m)
		if err != nil {
			t.Fatal(err)
		}
		_, stored := report.Services[namespace+"/"+name]
		clean := report.OK() && len(report.Leaked) == 0
		if !stored && clean {
			return true
		}
		if !stored && !gone {
			gone, deadline = true, time.Now().Add(30*time.Second)
		}
		if time.Now().After(deadline) {
			if stored && clean {
				return false
			}
			t.Fatalf("after the lost write: Service %s stored %v, reservations:\n%s", name, stored, report)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func lostDelete(t *testing.T, m model.Name) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The Services' watch cache on: the delete's read of the Service is
	// then the cache's, and the fault, which delays every request naming
	// the Service's key, delays the delete alone. Without the cache the
	// read is delayed too and the delete is never sent in time.
	l := startLost(t, m, func(o *apiserver.Options) { o.WatchCacheSizes = []string{"services#100"} })
	fast, slow, proxy := l.fast, l.slow, l.proxy

	svc := newService("lost", shape{typ: corev1.ServiceTypeNodePort})
	created, err := fast.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created %s with ClusterIP %s, node port %d", created.Name, created.Spec.ClusterIP, created.Spec.Ports[0].NodePort)
	// The watch cache holds it (a read at its resourceVersion waits for
	// that), so the delete's first read is the cache's and only the delete
	// itself goes to etcd.
	if _, err := fast.CoreV1().Services(namespace).Get(ctx, "lost", metav1.GetOptions{ResourceVersion: created.ResourceVersion}); err != nil {
		t.Fatal(err)
	}

	key := etcdlayout.Layout{}.Service(namespace, "lost")
	for attempt := 1; ; attempt++ {
		warmWriteLease(ctx, t, fast, "lost", attempt)
		proxy.Set(faultproxy.Fault{Delay: lostDelay, Direction: faultproxy.ToTarget, Match: [][]byte{[]byte(key)}})
		err = slow.CoreV1().Services(namespace).Delete(ctx, "lost", metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			t.Fatalf("delete through the slow path answered %v, want its answer lost (a timeout)", err)
		}
		t.Logf("delete answered: %v", err)
		// The delete lands (until then the Service is stored), the server
		// learns it and releases: no reservation is left, with no repair.
		landed := l.settled(ctx, t, m, "lost", landWindow)
		proxy.Set(faultproxy.Fault{})
		if landed {
			break
		}
		if attempt == lostAttempts {
			t.Fatalf("in %d attempts the delete never reached etcd before its client gave up", lostAttempts)
		}
		t.Logf("attempt %d: the delete never reached etcd (the Service keeps its reservations); again", attempt)
	}

	// What it held is free: a Service asking for the same address and port
	// gets them.
	again := newService("again", shape{typ: corev1.ServiceTypeNodePort})
	again.Spec.ClusterIP, again.Spec.ClusterIPs = created.Spec.ClusterIP, created.Spec.ClusterIPs
	again.Spec.Ports[0].NodePort = created.Spec.Ports[0].NodePort
	if _, err := fast.CoreV1().Services(namespace).Create(ctx, again, metav1.CreateOptions{}); err != nil {
		l.logHistory(ctx, t, created.ResourceVersion)
		t.Fatalf("create with the deleted Service's ClusterIP and node port: %v", err)
	}
}

// logHistory logs every change etcd made under /registry/ since revision
// rv (a resourceVersion): which key, and for a range map how many of its
// slots were set, so that a failure shows who wrote what and when.
func (l lostSetup) logHistory(ctx context.Context, t *testing.T, rv string) {
	t.Helper()
	from, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Logf("history: resourceVersion %q: %v", rv, err)
		return
	}
	now, err := l.direct.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Logf("history: %v", err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for resp := range l.direct.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(from)) {
		for _, ev := range resp.Events {
			detail := ""
			if ra, err := etcdlayout.DecodeRangeAllocation(ev.Kv.Value); err == nil {
				set := 0
				var nonzero []string // which bytes hold the set bits, as stored
				for j, b := range ra.Data {
					set += bits.OnesCount8(b)
					if b != 0 && len(nonzero) < 16 {
						nonzero = append(nonzero, fmt.Sprintf("%d:%02x", j, b))
					}
				}
				detail = fmt.Sprintf(" (%s: %d set; bytes %v of %d)", ra.Range, set, nonzero, len(ra.Data))
			}
			t.Logf("history: revision %d %s %s%s", ev.Kv.ModRevision, ev.Type, ev.Kv.Key, detail)
		}
		if resp.Err() != nil {
			t.Logf("history: %v", resp.Err())
			return
		}
		if n := len(resp.Events); n > 0 && resp.Events[n-1].Kv.ModRevision >= now.Header.Revision {
			return
		}
	}
}

// TestLostClaimLeavesNothing: a Service create whose IPAddress create (the
// claim of its static ClusterIP) loses its answer (every byte naming that
// IPAddress reaches etcd 4 s late, the client gives up after 1.5 s)
// fails, and the IPAddress that lands later is not left behind: the claim
// learns it was stored, through the request's fence, and the failed
// create releases it as any claim. IPAddress model.
func TestLostClaimLeavesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server; not in -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := startLost(t, model.IPAddress)
	const ip = "10.96.0.77"
	key := etcdlayout.Layout{}.IPAddress(ip)
	svc := newService("claimed", shape{typ: corev1.ServiceTypeClusterIP})
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
	// A Service of its own to warm the write lease with, on an address it
	// names: allocated dynamically, it could take the test's own.
	warm := newService("warm", shape{typ: corev1.ServiceTypeClusterIP})
	warm.Spec.ClusterIP, warm.Spec.ClusterIPs = "10.96.0.5", []string{"10.96.0.5"}
	if _, err := l.fast.CoreV1().Services(namespace).Create(ctx, warm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		warmWriteLease(ctx, t, l.fast, "warm", attempt)
		if claimLandedLate(ctx, t, l, key, svc) {
			break
		}
		if !l.settled(ctx, t, model.IPAddress, "claimed", 5*time.Second) {
			t.Fatalf("the Service whose create failed is stored")
		}
		if attempt == lostAttempts {
			t.Fatalf("in %d attempts the IPAddress create never reached etcd before its client gave up", lostAttempts)
		}
		t.Logf("attempt %d: the IPAddress create never reached etcd (nothing stored); again", attempt)
	}
	if !l.settled(ctx, t, model.IPAddress, "claimed", 30*time.Second) {
		t.Fatalf("the Service whose create failed is stored")
	}
	l.proxy.Set(faultproxy.Fault{})
	if _, err := l.fast.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create with the same ClusterIP afterwards: %v", err)
	}
}

// claimLandedLate creates svc through the slow path while every byte naming
// key (its IPAddress) reaches etcd late, and reports whether the IPAddress
// was stored late and deleted again (true), or never stored (false).
func claimLandedLate(ctx context.Context, t *testing.T, l lostSetup, key string, svc *corev1.Service) bool {
	t.Helper()
	wctx, stopWatch := context.WithTimeout(ctx, 30*time.Second)
	defer stopWatch()
	events := l.direct.Watch(wctx, key)
	l.proxy.Set(faultproxy.Fault{Delay: lostDelay, Direction: faultproxy.ToTarget, Match: [][]byte{[]byte(key)}})
	defer l.proxy.Set(faultproxy.Fault{})
	_, err := l.slow.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err == nil {
		t.Fatal("create through the slow path succeeded, want its answer lost (a timeout)")
	}
	t.Logf("create answered: %v", err)
	// The IPAddress lands after the create failed, and is deleted again.
	var seen []string
	window := time.After(landWindow)
	for !slices.Equal(seen, []string{"PUT", "DELETE"}) {
		select {
		case resp, ok := <-events:
			if !ok {
				t.Fatalf("30 s after the lost claim, the IPAddress's events were %v; want it stored late and released", seen)
			}
			for _, ev := range resp.Events {
				seen = append(seen, ev.Type.String())
			}
		case <-window:
			if len(seen) == 0 {
				return false
			}
			window = nil // it landed: wait for its release
		}
	}
	return true
}

// warmWriteLease writes Service name through the fast path, so that the
// faulted write right after it finds a write lease to reuse. A server
// hands a lease out for at most 10 s after its grant (fence.maxLeaseReuse);
// later, a write must ask etcd for a new one under the fault, and the
// fault delays every byte behind the faulted key's on the server's one
// connection to etcd, so that grant may outlive the request and no
// attempt could reach etcd. It waits until a read at the write's
// resourceVersion sees it, so that a watch cache's read is still the
// cache's.
func warmWriteLease(ctx context.Context, t *testing.T, fast kubernetes.Interface, name string, attempt int) {
	t.Helper()
	cur, err := fast.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Labels = map[string]string{"attempt": strconv.Itoa(attempt)}
	updated, err := fast.CoreV1().Services(namespace).Update(ctx, cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fast.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{ResourceVersion: updated.ResourceVersion}); err != nil {
		t.Fatal(err)
	}
}
