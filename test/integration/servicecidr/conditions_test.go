package servicecidr_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/testserver"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/ipaddress/servicecidr"
)

// conditionBound is how long the conditions may take to show a change:
// the controller writes them at most once per DefaultConditionInterval,
// plus a watch delay and room for a loaded machine.
const conditionBound = servicecidr.DefaultConditionInterval + 10*time.Second

// usedIn counts, from a consistent list (etcd), the IPAddresses in the
// usable addresses of an IPv4 prefix (not its network nor broadcast
// address), and the Services holding them.
func usedIn(ctx context.Context, c kubernetes.Interface, prefix string) (used, services int, err error) {
	p := netip.MustParsePrefix(prefix)
	list, err := c.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("list IPAddresses: %w", err)
	}
	last := p.Addr()
	for i := 0; i < 1<<(32-p.Bits())-1; i++ {
		last = last.Next()
	}
	for _, ipa := range list.Items {
		a, err := netip.ParseAddr(ipa.Name)
		if err != nil || !p.Contains(a) || a == p.Addr() || a == last {
			continue
		}
		used++
		if ipa.Spec.ParentRef != nil {
			services++
		}
	}
	return used, services, nil
}

// capacityMessage is the message the controller writes for an IPv4
// prefix with used addresses taken.
func capacityMessage(prefix string, used int) string {
	p := netip.MustParsePrefix(prefix)
	size := 1<<(32-p.Bits()) - 2
	return fmt.Sprintf("%s: size %d, used %d, free %d", prefix, size, used, size-used)
}

// waitConditionsMatch polls until ServiceCIDR name's capacity condition
// shows what etcd holds, and returns the condition.
func waitConditionsMatch(ctx context.Context, t *testing.T, c kubernetes.Interface, name, prefix string) *metav1.Condition {
	t.Helper()
	var got *metav1.Condition
	var want string
	poll(ctx, t, conditionBound, name+"'s capacity matches etcd", func() (bool, error) {
		used, _, err := usedIn(ctx, c, prefix)
		if err != nil {
			return false, err
		}
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want = capacityMessage(prefix, used)
		got = meta.FindStatusCondition(sc.Status.Conditions, servicecidr.ConditionCapacityIPv4)
		if got == nil || got.Message != want {
			return false, fmt.Errorf("condition %+v, want message %q", got, want)
		}
		return true, nil
	})
	return got
}

// waitCondition polls until ServiceCIDR name has a condition of kind with
// reason and message.
func waitCondition(ctx context.Context, t *testing.T, c kubernetes.Interface, name, kind, reason, message string) {
	t.Helper()
	poll(ctx, t, conditionBound, fmt.Sprintf("%s: %s %s", name, kind, reason), func() (bool, error) {
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got := meta.FindStatusCondition(sc.Status.Conditions, kind)
		if got == nil || got.Reason != reason || got.Message != message {
			return false, fmt.Errorf("condition %+v", got)
		}
		return true, nil
	})
}

func scrape(ctx context.Context, t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	body, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer body.Close()
	out, err := io.ReadAll(body)
	if err != nil {
		t.Fatalf("read /metrics: %v", err)
	}
	return string(out)
}

// TestConditionsMatchEtcd: the conditions of our own show what etcd holds
// after creates, deletes, a drain and a restart of the server on the same
// etcd; upstream's Ready is kept beside them; right after the restart,
// before any allocation, the allocator gauges count the addresses
// already held.
func TestConditionsMatchEtcd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	opts := testserver.Options{ServiceRange: "10.96.0.0/24", Model: "ipaddress", Etcd: etcd, DataDir: filepath.Join(t.TempDir(), "data")}
	srv := testserver.Start(t, opts)
	c := srv.Client
	const small, outer = "10.100.0.0/28", "10.100.0.0/24"
	newServiceCIDR(ctx, t, srv, "small", small)
	newServiceCIDR(ctx, t, srv, "outer", outer)
	waitCondition(ctx, t, c, "small", servicecidr.ConditionOverlapping, servicecidr.ReasonOverlaps, `overlaps ServiceCIDR "outer" (10.100.0.0/24)`)
	waitCondition(ctx, t, c, "outer", servicecidr.ConditionOverlapping, servicecidr.ReasonOverlaps, `overlaps ServiceCIDR "small" (10.100.0.0/28)`)
	waitCondition(ctx, t, c, "kubernetes", servicecidr.ConditionOverlapping, servicecidr.ReasonNoOverlap, "no other ServiceCIDR overlaps it")

	// Fill small with chosen addresses, and put dynamic ones in the default range.
	for i := 1; i <= 14; i++ {
		if _, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService(fmt.Sprintf("s%d", i), fmt.Sprintf("10.100.0.%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService(fmt.Sprintf("d%d", i), ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if got := waitConditionsMatch(ctx, t, c, "small", small); got.Status != metav1.ConditionFalse || got.Reason != servicecidr.ReasonFull {
		t.Errorf("small after 14 creates: %+v, want False/Full", got)
	}
	waitConditionsMatch(ctx, t, c, "outer", outer)
	waitConditionsMatch(ctx, t, c, "kubernetes", "10.96.0.0/24")

	for i := 1; i <= 4; i++ {
		if err := c.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, fmt.Sprintf("s%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := annotate(ctx, c, "small", lifecycle.DrainingAnnotation, ptr("true")); err != nil {
		t.Fatal(err)
	}
	if got := waitConditionsMatch(ctx, t, c, "small", small); got.Status != metav1.ConditionTrue || got.Reason != servicecidr.ReasonAvailable {
		t.Errorf("small after 4 deletes: %+v, want True/Available", got)
	}
	waitCondition(ctx, t, c, "small", servicecidr.ConditionDraining, servicecidr.ReasonDraining, "takes no new allocation; 10 Services still hold addresses in it")

	// Restart on the same etcd: the gauges count what is held before any allocation.
	srv.Stop()
	srv = testserver.Start(t, opts)
	c = srv.Client
	used, _, err := usedIn(ctx, c, "10.96.0.0/24")
	if err != nil {
		t.Fatal(err)
	}
	text := scrape(ctx, t, c)
	for _, want := range []string{
		fmt.Sprintf(`kube_apiserver_clusterip_allocator_allocated_ips{cidr="10.96.0.0/24"} %d`, used),
		fmt.Sprintf(`kube_apiserver_clusterip_allocator_available_ips{cidr="10.96.0.0/24"} %d`, 254-used),
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("/metrics right after the restart lacks %q", want)
		}
	}
	if t.Failed() {
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "kube_apiserver_clusterip_allocator_a") {
				t.Log(line)
			}
		}
	}
	for _, name := range []string{"small", "outer", "kubernetes"} {
		sc, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if meta.FindStatusCondition(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady) == nil {
			t.Errorf("%s lost upstream's Ready condition: %+v", name, sc.Status.Conditions)
		}
	}
	for i := 5; i <= 6; i++ {
		if err := c.CoreV1().Services(metav1.NamespaceDefault).Delete(ctx, fmt.Sprintf("s%d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitConditionsMatch(ctx, t, c, "small", small)
	waitConditionsMatch(ctx, t, c, "outer", outer)
	waitCondition(ctx, t, c, "small", servicecidr.ConditionDraining, servicecidr.ReasonDraining, "takes no new allocation; 8 Services still hold addresses in it")
}

// ourConditions is the text of the conditions of our own in conds.
func ourConditions(conds []metav1.Condition) string {
	var parts []string
	for _, c := range conds {
		if strings.HasPrefix(c.Type, servicecidr.ConditionPrefix) {
			parts = append(parts, fmt.Sprintf("%s=%s/%s/%s", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return strings.Join(parts, "; ")
}

// TestConditionWritesAt32Clients: 32 clients create Services in one
// ServiceCIDR, each pausing between creates so the run spans a few
// intervals (about 130 creates/s for 10 s); the controller writes its conditions at
// most about once per interval (counted as changes of our conditions seen
// through a watch), and the last count shows within the interval and a
// watch delay of the last create.
func TestConditionWritesAt32Clients(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.96.0.0/20", Model: "ipaddress"})
	c := srv.Client
	const prefix = "10.96.0.0/20"
	waitConditionsMatch(ctx, t, c, "kubernetes", prefix)

	initial, err := c.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.NetworkingV1().ServiceCIDRs().Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=kubernetes", ResourceVersion: initial.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type change struct {
		at   time.Time
		text string
	}
	var (
		mu      sync.Mutex
		changes []change
		prev    = ourConditions(initial.Status.Conditions)
	)
	go func() {
		for ev := range w.ResultChan() {
			sc, ok := ev.Object.(*networkingv1.ServiceCIDR)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			text := ourConditions(sc.Status.Conditions)
			mu.Lock()
			if text != prev {
				changes = append(changes, change{at: time.Now(), text: text})
			}
			prev = text
			mu.Unlock()
		}
	}()

	const clients, perClient, pause = 32, 40, 250 * time.Millisecond
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range perClient {
				if _, err := c.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, clusterIPService(fmt.Sprintf("c%d-%d", i, j), ""), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				time.Sleep(pause)
			}
		}()
	}
	wg.Wait()
	lastCreate := time.Now()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	createTime := lastCreate.Sub(start)
	want := capacityMessage(prefix, clients*perClient+1) // and default/kubernetes
	t.Logf("%d creates by %d clients in %v", clients*perClient, clients, createTime.Round(time.Millisecond))
	poll(ctx, t, conditionBound, "the final count", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(changes) == 0 {
			return false, fmt.Errorf("no conditions write seen")
		}
		last := changes[len(changes)-1].text
		return strings.Contains(last, want), fmt.Errorf("%d writes seen, the last %s; want %q", len(changes), last, want)
	})
	mu.Lock()
	shown := changes[len(changes)-1].at
	writes := 0
	for _, ch := range changes {
		if !ch.at.Before(start) {
			writes++
		}
	}
	mu.Unlock()
	lag := shown.Sub(lastCreate)
	span := shown.Sub(start)
	t.Logf("%d creates by %d clients in %v: %d conditions writes over %v (%.2f/s); lag from the last create to the final count: %v",
		clients*perClient, clients, createTime.Round(time.Millisecond), writes, span.Round(time.Millisecond),
		float64(writes)/span.Seconds(), lag.Round(time.Millisecond))
	if limit := int(span/servicecidr.DefaultConditionInterval) + 2; writes > limit {
		t.Errorf("%d conditions writes over %v, want at most %d (one per %v)", writes, span, limit, servicecidr.DefaultConditionInterval)
	}
	if lag > conditionBound {
		t.Errorf("lag %v, want at most %v", lag, conditionBound)
	}
}
