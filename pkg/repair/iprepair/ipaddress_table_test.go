package iprepair_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/iprepair"
	"github.com/allocator/allocator/pkg/repair/report"
)

// The table tests below run the IPAddress repair's passes (RunOnce) on
// client-go's fake clientset, one row per case of the table in the
// package doc. The IPAddresses are created at tableEpoch; the clock of a
// pass is tableEpoch plus the pass's after, and the grace is tableGrace, so
// a pass at time.Hour judges every IPAddress as old enough to delete.
var tableEpoch = time.Date(2026, time.January, 1, 12, 0, 0, 0, time.UTC)

const tableGrace = 30 * time.Second

// tableService returns a ClusterIP Service created at tableEpoch+age
// (negative: before the IPAddresses) holding ips, with UID "uid-"+name.
func tableService(name string, age time.Duration, ips ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name),
			ResourceVersion: "1", CreationTimestamp: metav1.NewTime(tableEpoch.Add(age))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips},
	}
}

// tableIPAddress returns an IPAddress created at tableEpoch, with UID
// "uid-"+name and resourceVersion "1", managed by managedBy (ours:
// ipaddress.ManagedBy) and referencing parent.
func tableIPAddress(name, managedBy string, parent *networkingv1.ParentReference) *networkingv1.IPAddress {
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1",
			CreationTimestamp: metav1.NewTime(tableEpoch),
			Labels:            map[string]string{ipaddress.LabelIPFamily: familyOf(name), ipaddress.LabelManagedBy: managedBy}},
		Spec: networkingv1.IPAddressSpec{ParentRef: parent},
	}
}

// familyOf returns the ip-family label value of an address.
func familyOf(ip string) string {
	if strings.Contains(ip, ":") {
		return "IPv6"
	}
	return "IPv4"
}

// ours returns an IPAddress of ours for the Service default/service.
func ours(name, service string) *networkingv1.IPAddress {
	return tableIPAddress(name, ipaddress.ManagedBy, serviceParent(service))
}

func serviceParent(name string) *networkingv1.ParentReference {
	return &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: name}
}

// tableServiceCIDR is the cluster's ServiceCIDR in every row.
func tableServiceCIDR() *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", ResourceVersion: "1"},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.0.0.0/24", "fd00::/120"}},
	}
}

// eventLog is an EventRecorder that keeps each event as
// "Kind name Reason: message" (name is namespace/name for a Service).
type eventLog struct {
	mu     sync.Mutex
	events []string // guarded by mu
}

func (l *eventLog) Event(obj runtime.Object, eventType, reason, message string) {
	var on string
	switch o := obj.(type) {
	case *corev1.Service:
		on = "Service " + o.Namespace + "/" + o.Name
	case *networkingv1.IPAddress:
		on = "IPAddress " + o.Name
	default:
		on = fmt.Sprintf("%T", obj)
	}
	if eventType != corev1.EventTypeWarning {
		on = eventType + " " + on
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, on+" "+reason+": "+message)
}

func (l *eventLog) Eventf(obj runtime.Object, eventType, reason, messageFmt string, args ...any) {
	l.Event(obj, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

func (l *eventLog) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventType, reason, messageFmt string, args ...any) {
	l.Event(obj, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

// take returns the events recorded since the last take.
func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	events := l.events
	l.events = nil
	return events
}

// ipAddressWrites returns the writes to IPAddresses among actions:
// "create NAME for NS/NAME", "update NAME", "delete NAME if uid=U rv=R"
// (the delete's preconditions; "unconditionally" when it has none).
func ipAddressWrites(actions []k8stesting.Action) []string {
	var writes []string
	for _, a := range actions {
		if a.GetResource().Resource != "ipaddresses" {
			continue
		}
		// By verb: an UpdateAction is a CreateAction too (both carry an object).
		switch a.GetVerb() {
		case "create":
			obj := a.(k8stesting.CreateAction).GetObject().(*networkingv1.IPAddress)
			writes = append(writes, "create "+obj.Name+" for "+parentName(obj))
		case "update":
			writes = append(writes, "update "+a.(k8stesting.UpdateAction).GetObject().(*networkingv1.IPAddress).Name)
		case "delete":
			a := a.(k8stesting.DeleteAction)
			pre := a.GetDeleteOptions().Preconditions
			if pre == nil || pre.UID == nil || pre.ResourceVersion == nil {
				writes = append(writes, "delete "+a.GetName()+" unconditionally")
				continue
			}
			writes = append(writes, fmt.Sprintf("delete %s if uid=%s rv=%s", a.GetName(), *pre.UID, *pre.ResourceVersion))
		case "patch":
			writes = append(writes, "patch "+a.(k8stesting.PatchAction).GetName())
		}
	}
	return writes
}

func parentName(obj *networkingv1.IPAddress) string {
	p := obj.Spec.ParentRef
	switch {
	case p == nil:
		return "no parent"
	case p.Group == "" && p.Resource == "services":
		return p.Namespace + "/" + p.Name
	default:
		return p.Group + "/" + p.Resource + "/" + p.Namespace + "/" + p.Name
	}
}

// tablePass is one RunOnce of a row and what it must find and do.
type tablePass struct {
	after    time.Duration // the clock reads tableEpoch+after
	problems []report.Problem
	events   []string // as eventLog keeps them
	writes   []string // as ipAddressWrites spells them
}

// sortProblems orders problems for comparison: the report's order follows
// the addresses, which is not what a row is about.
var sortProblems = cmpopts.SortSlices(func(a, b report.Problem) bool {
	return a.IP+a.Service+a.Type < b.IP+b.Service+b.Type
})

// runTablePasses seeds a fake clientset, runs the passes in order and checks
// each, then one more pass right after the last: it must write nothing and
// find exactly what the last pass left unresolved. Every seeded IPAddress
// no pass wrote must be as it was; every IPAddress the repair created must
// be the one the allocator would create for the Service now holding it.
// It returns the IPAddresses left, as "NAME → PARENT".
func runTablePasses(t *testing.T, services []*corev1.Service, ipas []*networkingv1.IPAddress, passes []tablePass) []string {
	t.Helper()
	objects := []runtime.Object{tableServiceCIDR()}
	for _, svc := range services {
		objects = append(objects, svc)
	}
	for _, ipa := range ipas {
		objects = append(objects, ipa)
	}
	client := fake.NewClientset(objects...)
	clock := clocktesting.NewFakeClock(tableEpoch)
	events := &eventLog{}
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{
		Client: client, Recorder: events, OrphanGrace: tableGrace, Now: clock.Now,
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var written []string
	run := func(name string, p tablePass) {
		t.Helper()
		clock.SetTime(tableEpoch.Add(p.after))
		client.ClearActions()
		rep, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(p.problems, rep.Problems, sortProblems, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: problems (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(p.events, events.take(), cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: events (-want +got):\n%s", name, diff)
		}
		writes := ipAddressWrites(client.Actions())
		if diff := cmp.Diff(p.writes, writes, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: writes to IPAddresses (-want +got):\n%s", name, diff)
		}
		if rep.Writes != len(writes) {
			t.Errorf("%s: the report counts %d writes, the client saw %d", name, rep.Writes, len(writes))
		}
		written = append(written, writes...)
	}
	for i, p := range passes {
		run(fmt.Sprintf("pass %d at +%v", i+1, p.after), p)
	}
	last := passes[len(passes)-1]
	rerun := tablePass{after: last.after + time.Second}
	for _, p := range last.problems {
		if !p.Fixed {
			rerun.problems = append(rerun.problems, p)
		}
	}
	for _, e := range last.events {
		// What only a person can fix is reported again; what was fixed is not.
		if !slices.ContainsFunc(last.problems, func(p report.Problem) bool { return p.Fixed && strings.HasSuffix(e, ": "+p.Message) }) {
			rerun.events = append(rerun.events, e)
		}
	}
	run("the rerun", rerun)

	list, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for i := range list.Items {
		got := &list.Items[i]
		left = append(left, got.Name+" → "+parentName(got))
		wrote := func(verb string) bool {
			return slices.ContainsFunc(written, func(w string) bool { return strings.HasPrefix(w, verb+" "+got.Name+" ") || w == verb+" "+got.Name })
		}
		ignore := cmp.Options{cmpopts.IgnoreFields(networkingv1.IPAddress{}, "TypeMeta"),
			cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion", "ManagedFields")}
		if seeded := seedOf(ipas, got.Name); seeded != nil && !wrote("create") {
			want := seeded.DeepCopy()
			if wrote("patch") { // the family label, the one field the repair patches
				want.Labels[ipaddress.LabelIPFamily] = familyOf(got.Name)
			}
			if diff := cmp.Diff(want, got, ignore); diff != "" {
				t.Errorf("IPAddress %s is not as seeded (-want +now):\n%s", got.Name, diff)
			}
			continue
		}
		holder := holderOf(services, got.Name)
		if holder == nil {
			t.Errorf("IPAddress %s was created for %s, which holds no such address", got.Name, parentName(got))
			continue
		}
		want := ipaddress.NewObject(parseAddr(t, got.Name), allocationOwner(holder))
		if diff := cmp.Diff(want, got, ignore); diff != "" {
			t.Errorf("IPAddress %s the repair created is not the allocator's (-want +got):\n%s", got.Name, diff)
		}
	}
	slices.Sort(left)
	return left
}

func seedOf(ipas []*networkingv1.IPAddress, name string) *networkingv1.IPAddress {
	for _, ipa := range ipas {
		if ipa.Name == name {
			return ipa
		}
	}
	return nil
}

func parseAddr(t *testing.T, text string) netip.Addr {
	t.Helper()
	ip, err := netip.ParseAddr(text)
	if err != nil {
		t.Fatalf("IPAddress name %q: %v", text, err)
	}
	return ip
}

func allocationOwner(svc *corev1.Service) allocation.Owner {
	return allocation.Owner{Namespace: svc.Namespace, Name: svc.Name, UID: string(svc.UID)}
}

// holderOf returns the oldest Service holding ip: the one an IPAddress the
// repair creates must reference (where a seeded IPAddress decides between
// holders, the repair creates none).
func holderOf(services []*corev1.Service, ip string) *corev1.Service {
	var holder *corev1.Service
	for _, svc := range services {
		if slices.Contains(svc.Spec.ClusterIPs, ip) && (holder == nil || svc.CreationTimestamp.Before(&holder.CreationTimestamp)) {
			holder = svc
		}
	}
	return holder
}

// TestIPAddressRepairTable runs the IPAddress repair's cases (the table in
// the package doc) on a fake clientset and checks, pass by pass, the
// findings, the events and the writes, then the IPAddresses left.
func TestIPAddressRepairTable(t *testing.T) {
	t.Parallel()
	const hour = time.Hour
	notAllocated := func(ip, svc string) report.Problem {
		return report.Problem{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: ip, Service: "default/" + svc, Fixed: true,
			Message: fmt.Sprintf("Cluster IP [%s]: %s is not allocated; repairing", familyOf(ip), ip)}
	}
	duplicate := func(ip, svc string) report.Problem {
		return report.Problem{Type: report.TypeDuplicate, Reason: report.ReasonAlreadyAllocated, IP: ip, Service: "default/" + svc,
			Message: fmt.Sprintf("Cluster IP [IPv4]:%s was assigned to multiple services; please recreate service", ip)}
	}
	for _, tc := range []struct {
		name        string
		services    []*corev1.Service
		ipAddresses []*networkingv1.IPAddress
		passes      []tablePass
		left        []string // the IPAddresses after the passes, "NAME → PARENT"
	}{
		{
			name:        "Service and IPAddress agree: no change",
			services:    []*corev1.Service{tableService("a", -hour, "10.0.0.10", "fd00::10")},
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "a"), ours("fd00::10", "a")},
			passes:      []tablePass{{after: hour}},
			left:        []string{"10.0.0.10 → default/a", "fd00::10 → default/a"},
		},
		{
			name:     "Service's IPs have no IPAddress: created for it",
			services: []*corev1.Service{tableService("a", -hour, "10.0.0.10", "fd00::10")},
			passes: []tablePass{{
				after:    hour,
				problems: []report.Problem{notAllocated("10.0.0.10", "a"), notAllocated("fd00::10", "a")},
				events: []string{
					"Service default/a ClusterIPNotAllocated: Cluster IP [IPv4]: 10.0.0.10 is not allocated; repairing",
					"Service default/a ClusterIPNotAllocated: Cluster IP [IPv6]: fd00::10 is not allocated; repairing",
				},
				writes: []string{"create 10.0.0.10 for default/a", "create fd00::10 for default/a"},
			}},
			left: []string{"10.0.0.10 → default/a", "fd00::10 → default/a"},
		},
		{
			name:        "IPAddress of ours references a Service that is gone: re-created for the holder",
			services:    []*corev1.Service{tableService("a", -hour, "10.0.0.10")},
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "ghost")},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: "10.0.0.10", Service: "default/a", Fixed: true,
					Message: "the ClusterIP [IPv4]: 10.0.0.10 for Service default/a has a wrong reference; repairing"}},
				events: []string{"Service default/a ClusterIPNotAllocated: the ClusterIP [IPv4]: 10.0.0.10 for Service default/a has a wrong reference; repairing"},
				writes: []string{"delete 10.0.0.10 if uid=uid-10.0.0.10 rv=1", "create 10.0.0.10 for default/a"},
			}},
			left: []string{"10.0.0.10 → default/a"},
		},
		{
			name: "IPAddress of ours references a Service that does not hold it: re-created for the holder",
			services: []*corev1.Service{
				tableService("a", -hour, "10.0.0.10"),
				tableService("other", -hour, "10.0.0.11"),
			},
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "other"), ours("10.0.0.11", "other")},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeRepair, Reason: report.ReasonWrongReference, IP: "10.0.0.10", Service: "default/a", Fixed: true,
					Message: "IPAddress: 10.0.0.10 for Service default/other has a wrong reference; cleaning up"}},
				events: []string{"IPAddress 10.0.0.10 IPAddressWrongReference: IPAddress: 10.0.0.10 for Service default/other has a wrong reference; cleaning up"},
				writes: []string{"delete 10.0.0.10 if uid=uid-10.0.0.10 rv=1", "create 10.0.0.10 for default/a"},
			}},
			left: []string{"10.0.0.10 → default/a", "10.0.0.11 → default/other"},
		},
		{
			name:        "IPAddress with a wrong owner, younger than the grace: reported, re-created once old enough",
			services:    []*corev1.Service{tableService("a", -hour, "10.0.0.10")},
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "ghost")},
			passes: []tablePass{
				{after: 10 * time.Second, problems: []report.Problem{{Type: report.TypeRepair, IP: "10.0.0.10", Service: "default/a",
					Message: "IPAddress 10.0.0.10 references default/ghost, not Service default/a that holds the address; it is re-created for that Service once it is 30s old"}}},
				{
					after: tableGrace + time.Second,
					problems: []report.Problem{{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: "10.0.0.10", Service: "default/a", Fixed: true,
						Message: "the ClusterIP [IPv4]: 10.0.0.10 for Service default/a has a wrong reference; repairing"}},
					events: []string{"Service default/a ClusterIPNotAllocated: the ClusterIP [IPv4]: 10.0.0.10 for Service default/a has a wrong reference; repairing"},
					writes: []string{"delete 10.0.0.10 if uid=uid-10.0.0.10 rv=1", "create 10.0.0.10 for default/a"},
				},
			},
			left: []string{"10.0.0.10 → default/a"},
		},
		{
			name: "two Services, one IP, no IPAddress: the older gets it, the younger is reported",
			services: []*corev1.Service{
				tableService("young", -time.Minute, "10.0.0.10"),
				tableService("old", -hour, "10.0.0.10"),
			},
			passes: []tablePass{{
				after:    hour,
				problems: []report.Problem{notAllocated("10.0.0.10", "old"), duplicate("10.0.0.10", "young")},
				events: []string{
					"Service default/old ClusterIPNotAllocated: Cluster IP [IPv4]: 10.0.0.10 is not allocated; repairing",
					"Service default/young ClusterIPAlreadyAllocated: Cluster IP [IPv4]:10.0.0.10 was assigned to multiple services; please recreate service",
				},
				writes: []string{"create 10.0.0.10 for default/old"},
			}},
			left: []string{"10.0.0.10 → default/old"},
		},
		{
			name: "two Services, one IP: the one the IPAddress references keeps it, even if younger",
			services: []*corev1.Service{
				tableService("young", -time.Minute, "10.0.0.10"),
				tableService("old", -hour, "10.0.0.10"),
			},
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "young")},
			passes: []tablePass{{
				after:    hour,
				problems: []report.Problem{duplicate("10.0.0.10", "old")},
				events:   []string{"Service default/old ClusterIPAlreadyAllocated: Cluster IP [IPv4]:10.0.0.10 was assigned to multiple services; please recreate service"},
			}},
			left: []string{"10.0.0.10 → default/young"},
		},
		{
			name:        "IPAddress with no Service: leaked, deleted only once older than the grace",
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "ghost")},
			passes: []tablePass{
				{after: 0, problems: []report.Problem{pendingLeak("10.0.0.10", "default/ghost")}},
				{after: 10 * time.Second, problems: []report.Problem{pendingLeak("10.0.0.10", "default/ghost")}},
				{after: tableGrace - time.Second, problems: []report.Problem{pendingLeak("10.0.0.10", "default/ghost")}},
				{
					after: tableGrace,
					problems: []report.Problem{{Type: report.TypeLeak, Reason: report.ReasonIPNotAllocated, IP: "10.0.0.10", Service: "default/ghost", Fixed: true,
						Message: "IPAddress: 10.0.0.10 for Service default/ghost appears to have leaked: cleaning up"}},
					events: []string{"IPAddress 10.0.0.10 IPAddressNotAllocated: IPAddress: 10.0.0.10 for Service default/ghost appears to have leaked: cleaning up"},
					writes: []string{"delete 10.0.0.10 if uid=uid-10.0.0.10 rv=1"},
				},
			},
		},
		{
			name:        "IPAddress whose Service exists but does not hold it: leaked, deleted after the grace",
			services:    []*corev1.Service{tableService("a", -hour, "10.0.0.11")},
			ipAddresses: []*networkingv1.IPAddress{ours("10.0.0.10", "a"), ours("10.0.0.11", "a")},
			passes: []tablePass{
				{after: time.Second, problems: []report.Problem{pendingLeak("10.0.0.10", "default/a")}},
				{
					after: hour,
					problems: []report.Problem{{Type: report.TypeLeak, Reason: report.ReasonWrongReference, IP: "10.0.0.10", Service: "default/a", Fixed: true,
						Message: "IPAddress: 10.0.0.10 for Service default/a has a wrong reference; cleaning up"}},
					events: []string{"IPAddress 10.0.0.10 IPAddressWrongReference: IPAddress: 10.0.0.10 for Service default/a has a wrong reference; cleaning up"},
					writes: []string{"delete 10.0.0.10 if uid=uid-10.0.0.10 rv=1"},
				},
			},
			left: []string{"10.0.0.11 → default/a"},
		},
		{
			name:     "Service's IP outside every ServiceCIDR: reported, no IPAddress created",
			services: []*corev1.Service{tableService("outside", -hour, "10.9.9.9")},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeOutOfRange, Reason: report.ReasonOutOfRange, IP: "10.9.9.9", Service: "default/outside",
					Message: "Cluster IP [IPv4]: 10.9.9.9 is not within any configured Service CIDR; please recreate service"}},
				events: []string{"Service default/outside ClusterIPOutOfRange: Cluster IP [IPv4]: 10.9.9.9 is not within any configured Service CIDR; please recreate service"},
			}},
		},
		{
			name:        "IPAddress outside every ServiceCIDR, held by its Service: reported on the Service, the IPAddress kept",
			services:    []*corev1.Service{tableService("outside", -hour, "10.9.9.9")},
			ipAddresses: []*networkingv1.IPAddress{ours("10.9.9.9", "outside")},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeOutOfRange, Reason: report.ReasonOutOfRange, IP: "10.9.9.9", Service: "default/outside",
					Message: "Cluster IP [IPv4]: 10.9.9.9 is not within any configured Service CIDR; please recreate service"}},
				events: []string{"Service default/outside ClusterIPOutOfRange: Cluster IP [IPv4]: 10.9.9.9 is not within any configured Service CIDR; please recreate service"},
			}},
			left: []string{"10.9.9.9 → default/outside"},
		},
		{
			name:        "IPAddress outside every ServiceCIDR, held by no Service: a leak like any other",
			ipAddresses: []*networkingv1.IPAddress{ours("10.9.9.9", "ghost")},
			passes: []tablePass{
				{after: time.Second, problems: []report.Problem{pendingLeak("10.9.9.9", "default/ghost")}},
				{
					after: hour,
					problems: []report.Problem{{Type: report.TypeLeak, Reason: report.ReasonIPNotAllocated, IP: "10.9.9.9", Service: "default/ghost", Fixed: true,
						Message: "IPAddress: 10.9.9.9 for Service default/ghost appears to have leaked: cleaning up"}},
					events: []string{"IPAddress 10.9.9.9 IPAddressNotAllocated: IPAddress: 10.9.9.9 for Service default/ghost appears to have leaked: cleaning up"},
					writes: []string{"delete 10.9.9.9 if uid=uid-10.9.9.9 rv=1"},
				},
			},
		},
		{
			name:        "IPAddress not managed by us, held by no Service: reported as a leak, left untouched",
			ipAddresses: []*networkingv1.IPAddress{tableIPAddress("10.0.0.10", "someone-else", serviceParent("ghost"))},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeLeak, IP: "10.0.0.10", Service: "default/ghost",
					Message: `IPAddress 10.0.0.10 references Service default/ghost, which does not hold it; it is managed by "someone-else", not ipallocator.k8s.io, and left untouched`}},
			}},
			left: []string{"10.0.0.10 → default/ghost"},
		},
		{
			name:     "IPAddress not managed by us blocks a Service's IP: the Service is reported, the IPAddress left untouched",
			services: []*corev1.Service{tableService("blocked", -hour, "10.0.0.10")},
			ipAddresses: []*networkingv1.IPAddress{tableIPAddress("10.0.0.10", "someone-else",
				&networkingv1.ParentReference{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "default", Name: "gw"})},
			passes: []tablePass{{
				after:    hour,
				problems: []report.Problem{duplicate("10.0.0.10", "blocked")},
				events:   []string{"Service default/blocked ClusterIPAlreadyAllocated: Cluster IP [IPv4]:10.0.0.10 was assigned to multiple services; please recreate service"},
			}},
			left: []string{"10.0.0.10 → gateway.networking.k8s.io/gateways/default/gw"},
		},
		{
			name:        "IPAddress not managed by us, for the Service that holds it: reported, left untouched",
			services:    []*corev1.Service{tableService("a", -hour, "10.0.0.10")},
			ipAddresses: []*networkingv1.IPAddress{tableIPAddress("10.0.0.10", "someone-else", serviceParent("a"))},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeRepair, IP: "10.0.0.10", Service: "default/a",
					Message: "IPAddress 10.0.0.10 of Service default/a has the labels map[ipaddress.kubernetes.io/ip-family:IPv4 ipaddress.kubernetes.io/managed-by:someone-else], not the ones of ipallocator.k8s.io; it is not managed by the repair and left as it is"}},
			}},
			left: []string{"10.0.0.10 → default/a"},
		},
		{
			name:     "IPAddress of ours with the wrong family label: the label is set right, the rest kept",
			services: []*corev1.Service{tableService("a", -hour, "10.0.0.10")},
			ipAddresses: []*networkingv1.IPAddress{func() *networkingv1.IPAddress {
				ipa := ours("10.0.0.10", "a")
				ipa.Labels[ipaddress.LabelIPFamily] = "IPv6"
				ipa.Annotations = map[string]string{ipaddress.AnnotationServiceUID: "uid-a", "example.com/note": "kept"}
				return ipa
			}()},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeRepair, IP: "10.0.0.10", Service: "default/a", Fixed: true,
					Message: `IPAddress 10.0.0.10 has the label ipaddress.kubernetes.io/ip-family="IPv6"; repairing`}},
				writes: []string{"patch 10.0.0.10"},
			}},
			left: []string{"10.0.0.10 → default/a"},
		},
		{
			name:     "Service's ClusterIP does not parse: reported, nothing written",
			services: []*corev1.Service{tableService("garbage", -hour, "not-an-ip")},
			passes: []tablePass{{
				after: hour,
				problems: []report.Problem{{Type: report.TypeInvalid, Reason: report.ReasonNotValid, IP: "not-an-ip", Service: "default/garbage",
					Message: "Cluster IP not-an-ip is not a valid IP; please recreate Service"}},
				events: []string{"Service default/garbage ClusterIPNotValid: Cluster IP not-an-ip is not a valid IP; please recreate Service"},
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			left := runTablePasses(t, tc.services, tc.ipAddresses, tc.passes)
			if diff := cmp.Diff(tc.left, left, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("IPAddresses left (-want +got):\n%s", diff)
			}
		})
	}
}

// pendingLeak is the finding on an orphan of ours still inside the grace.
func pendingLeak(ip, parent string) report.Problem {
	return report.Problem{Type: report.TypeLeak, IP: ip, Service: parent,
		Message: fmt.Sprintf("IPAddress %s (parent %s) is held by no Service; it is deleted once it is %v old", ip, parent, tableGrace)}
}

// dryRunPass runs one dry-run pass over client an hour after tableEpoch,
// with workers (0: the default) and events recorded in events.
func dryRunPass(t *testing.T, client *fake.Clientset, events *eventLog, workers int) *report.Report {
	t.Helper()
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Workers: workers, Options: repair.Options{
		Client: client, Recorder: events, DryRun: true, OrphanGrace: tableGrace, Now: func() time.Time { return tableEpoch.Add(time.Hour) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestIPAddressRepairDryRun: a dry run over every kind of fault finds what
// a real pass would, and writes nothing and emits no event.
func TestIPAddressRepairDryRun(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(tableServiceCIDR(),
		tableService("a", -time.Hour, "10.0.0.10"),             // no IPAddress
		tableService("wr", -time.Hour, "10.0.0.11"),            // a wrong owner
		tableService("out", -time.Hour, "10.9.9.9"),            // out of range
		ours("10.0.0.11", "ghost"), ours("10.0.0.12", "ghost"), // and a leak
	)
	events := &eventLog{}
	rep := dryRunPass(t, client, events, 0)
	var found []string
	for _, p := range rep.Problems {
		found = append(found, fmt.Sprintf("%s %s %s fixed=%v", p.Type, p.Reason, p.IP, p.Fixed))
	}
	want := []string{
		"repair ClusterIPNotAllocated 10.0.0.10 fixed=false",
		"repair ClusterIPNotAllocated 10.0.0.11 fixed=false",
		"leak IPAddressNotAllocated 10.0.0.12 fixed=false",
		"outOfRange ClusterIPOutOfRange 10.9.9.9 fixed=false",
	}
	if diff := cmp.Diff(want, found); diff != "" {
		t.Errorf("dry run findings (-want +got):\n%s", diff)
	}
	if writes := ipAddressWrites(client.Actions()); len(writes) != 0 || rep.Writes != 0 || !rep.DryRun {
		t.Errorf("dry run wrote %q (report: %s, dry run %v)", writes, rep, rep.DryRun)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("dry run emitted events %q", got)
	}
}

// TestIPAddressRepairNoServiceCIDR: with no ServiceCIDR every address would
// look out of range, so the pass fails and changes nothing.
func TestIPAddressRepairNoServiceCIDR(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(tableService("a", -time.Hour, "10.0.0.10"), ours("10.0.0.11", "ghost"))
	events := &eventLog{}
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{Client: client, Recorder: events}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(context.Background()); !errors.Is(err, iprepair.ErrNoServiceCIDR) {
		t.Errorf("pass without a ServiceCIDR: %v, want ErrNoServiceCIDR", err)
	}
	if writes := ipAddressWrites(client.Actions()); len(writes) != 0 {
		t.Errorf("the failed pass wrote %q", writes)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("the failed pass emitted events %q", got)
	}
}

// TestIPAddressRepairCarryOver: while bitmap-model writers may be live, a
// Service's address without an IPAddress is their normal state: the
// IPAddress is created without an event or a finding, and counted.
func TestIPAddressRepairCarryOver(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset(tableServiceCIDR(), tableService("a", -time.Hour, "10.0.0.10", "fd00::10"))
	events := &eventLog{}
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{
		Options:   repair.Options{Client: client, Recorder: events},
		CarryOver: func() bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Consistent() || rep.Writes != 2 || r.CarriedOver() != 2 {
		t.Errorf("carry-over pass: %s, problems %+v, carried over %d; want 2 quiet creates", rep, rep.Problems, r.CarriedOver())
	}
	want := []string{"create 10.0.0.10 for default/a", "create fd00::10 for default/a"}
	if diff := cmp.Diff(want, ipAddressWrites(client.Actions())); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("carry-over emitted events %q", got)
	}
}

// enforceDeletePreconditions makes the fake clientset refuse, as the API
// server does, an IPAddress delete whose UID or resourceVersion
// precondition no longer matches the stored object (the fake ignores
// preconditions).
func enforceDeletePreconditions(client *fake.Clientset) {
	client.PrependReactor("delete", "ipaddresses", func(action k8stesting.Action) (bool, runtime.Object, error) {
		del := action.(k8stesting.DeleteAction)
		pre := del.GetDeleteOptions().Preconditions
		if pre == nil {
			return false, nil, nil
		}
		obj, err := client.Tracker().Get(del.GetResource(), "", del.GetName())
		if err != nil {
			return false, nil, nil // the default reactor answers NotFound
		}
		cur := obj.(*networkingv1.IPAddress)
		if (pre.UID != nil && *pre.UID != cur.UID) || (pre.ResourceVersion != nil && *pre.ResourceVersion != cur.ResourceVersion) {
			return true, nil, apierrors.NewConflict(del.GetResource().GroupResource(), del.GetName(),
				fmt.Errorf("precondition failed: uid %v rv %v, stored %s %s", *pre.UID, *pre.ResourceVersion, cur.UID, cur.ResourceVersion))
		}
		return false, nil, nil
	})
}

// TestIPAddressRepairOrphanReclaimedBeforeDelete: an old orphan of ours is
// released and claimed again for a new Service after the repair's fresh
// read of it and before its delete. The delete is conditional on the UID
// and resourceVersion read, so the new claim survives, and the pass says
// it could not finish the address instead of reporting a fix.
func TestIPAddressRepairOrphanReclaimedBeforeDelete(t *testing.T) {
	t.Parallel()
	orphan := ours("10.0.0.10", "ghost")
	client := fake.NewClientset(tableServiceCIDR(), orphan)
	enforceDeletePreconditions(client)
	reclaimed := ours("10.0.0.10", "new")
	reclaimed.UID, reclaimed.ResourceVersion = "uid-reclaimed", "2"
	// The repair reads the orphan's parent right before the delete: the
	// allocator's release and new claim land then.
	client.PrependReactor("get", "services", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.GetAction).GetName() == "ghost" {
			if err := client.Tracker().Update(networkingv1.SchemeGroupVersion.WithResource("ipaddresses"), reclaimed, ""); err != nil {
				t.Errorf("reclaim: %v", err)
			}
		}
		return false, nil, nil
	})
	events := &eventLog{}
	clock := clocktesting.NewFakeClock(tableEpoch.Add(time.Hour))
	r, err := iprepair.NewIPAddressRepair(iprepair.IPAddressConfig{Options: repair.Options{
		Client: client, Recorder: events, OrphanGrace: tableGrace, Now: clock.Now,
	}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.RunOnce(context.Background())
	if err == nil {
		t.Errorf("the pass succeeded though its delete was refused: %s %+v", rep, rep.Problems)
	}
	if diff := cmp.Diff([]string{"delete 10.0.0.10 if uid=uid-10.0.0.10 rv=1"}, ipAddressWrites(client.Actions())); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if rep != nil && (rep.Writes != 0 || slices.ContainsFunc(rep.Problems, func(p report.Problem) bool { return p.Fixed })) {
		t.Errorf("the refused delete is reported as done: %s %+v", rep, rep.Problems)
	}
	if got := events.take(); len(got) != 0 {
		t.Errorf("events for a delete that did not happen: %q", got)
	}
	got, err := client.NetworkingV1().IPAddresses().Get(context.Background(), "10.0.0.10", metav1.GetOptions{})
	if err != nil || got.UID != reclaimed.UID {
		t.Errorf("the new claim is gone: %v, %v", got, err)
	}
}

// TestIPAddressRepairPassWorkers: a pass reconciles its keys in chunks on
// several goroutines and reports what one goroutine would, in the same
// order: 3,000 addresses over six chunks, a third of them without an
// IPAddress, a third out of range, a third held rightly, and 400 leaks.
func TestIPAddressRepairPassWorkers(t *testing.T) {
	t.Parallel()
	cidr := tableServiceCIDR()
	cidr.Spec.CIDRs = []string{"10.0.0.0/20"}
	objs := []runtime.Object{cidr}
	for i := range 3000 {
		name := fmt.Sprintf("s%d", i)
		switch i % 3 {
		case 0: // no IPAddress
			objs = append(objs, tableService(name, -time.Hour, fmt.Sprintf("10.0.%d.%d", 1+i/250, 1+i%250)))
		case 1: // out of range
			objs = append(objs, tableService(name, -time.Hour, fmt.Sprintf("10.9.%d.%d", i/250, 1+i%250)))
		default:
			ip := fmt.Sprintf("10.0.%d.%d", 1+i/250, 1+i%250)
			objs = append(objs, tableService(name, -time.Hour, ip), ours(ip, name))
		}
	}
	for i := range 400 { // leaks
		objs = append(objs, ours(fmt.Sprintf("10.0.%d.%d", 14+i/200, 1+i%200), "ghost"))
	}
	pass := func(workers int) []string {
		rep := dryRunPass(t, fake.NewClientset(objs...), &eventLog{}, workers)
		var found []string
		for _, p := range rep.Problems {
			found = append(found, fmt.Sprintf("%s %s %s", p.Type, p.Reason, p.IP))
		}
		if rep.Services != 3000 || rep.Allocated != 1000+400 {
			t.Errorf("%d workers: report counts %d Services, %d allocated; want 3000, 1400", workers, rep.Services, rep.Allocated)
		}
		return found
	}
	one := pass(1)
	if len(one) != 1000+1000+400 {
		t.Fatalf("one worker found %d problems, want %d", len(one), 2400)
	}
	ips := make([]netip.Addr, len(one))
	for i, f := range one {
		ips[i] = netip.MustParseAddr(f[strings.LastIndexByte(f, ' ')+1:])
	}
	if !slices.IsSortedFunc(ips, netip.Addr.Compare) {
		t.Errorf("one worker's problems are not in address order")
	}
	if diff := cmp.Diff(one, pass(8)); diff != "" {
		t.Errorf("eight workers against one (-one +eight):\n%s", diff)
	}
}
