package app

import (
	"context"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/ipaddress/scope"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/report"
)

// TestExplainByDesign: after a pass, the job marks the findings about an
// IPAddress another controller manages (or nobody: made by hand) as
// foreign, which makes a leak or a repair finding left by design, and
// words what clears it and every outOfScope; findings about its own
// IPAddresses, about the bitmap, about node ports, and a foreign
// duplicate stay unresolved.
func TestExplainByDesign(t *testing.T) {
	t.Parallel()
	ipa := func(name, managedBy string) runtime.Object {
		o := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ipaddress.LabelIPFamily: "IPv4"}},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: "default", Name: "web"}}}
		if managedBy != "" {
			o.Labels[ipaddress.LabelManagedBy] = managedBy
		}
		return o
	}
	cidr := func(name string, annotations map[string]string, cidrs ...string) runtime.Object {
		return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
	}
	client := fake.NewClientset(
		ipa("10.0.0.9", ""),                   // made by hand
		ipa("10.0.0.10", "someone-else"),      // another controller's
		ipa("10.0.0.11", ipaddress.ManagedBy), // ours
		cidr("kubernetes", nil, "10.0.0.0/24"),
		cidr("scope-a", map[string]string{scope.NamespaceSelectorAnnotation: "team=a"}, "10.1.0.0/28"),
	)
	for _, tc := range []struct {
		name     string
		model    model.Name
		p        report.Problem
		standing report.Standing
		clear    []string // fragments of Clear, in order; none: Clear stays empty
	}{
		{name: "hand-made IPAddress of a Service that does not hold it", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeLeak, IP: "10.0.0.9", Service: "default/web"},
			standing: report.ByDesign,
			clear:    []string{"nothing manages it (made by hand?)", "kubectl delete ipaddress 10.0.0.9", "kubectl label ipaddress 10.0.0.9 ipaddress.kubernetes.io/managed-by=ipallocator.k8s.io --overwrite"}},
		{name: "another controller's IPAddress of its Service", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeRepair, IP: "10.0.0.10", Service: "default/web"},
			standing: report.ByDesign,
			clear:    []string{`"someone-else" manages it`, "kubectl label ipaddress 10.0.0.10 ipaddress.kubernetes.io/managed-by=ipallocator.k8s.io --overwrite"}},
		{name: "another controller's IPAddress holding another Service's address", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeDuplicate, Reason: report.ReasonAlreadyAllocated, IP: "10.0.0.10", Service: "default/db"},
			standing: report.Unresolved},
		{name: "our orphan in its grace", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeLeak, IP: "10.0.0.11", Service: "default/web"},
			standing: report.Unresolved},
		{name: "missing IPAddress, dry run", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeRepair, Reason: report.ReasonNotAllocated, IP: "10.0.0.12", Service: "default/api"},
			standing: report.Unresolved},
		{name: "bitmap leak where a hand-made IPAddress sits", model: model.Bitmap,
			p:        report.Problem{Type: report.TypeLeak, IP: "10.0.0.9"},
			standing: report.Unresolved},
		{name: "node-port leak", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeLeak, IP: "30009", Resource: "nodePort"},
			standing: report.Unresolved},
		{name: "outside its scope, in a scoped ServiceCIDR", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeOutOfScope, IP: "10.1.0.3", Service: "team-a/web"},
			standing: report.ByDesign,
			clear:    []string{"kubectl label namespace team-a", `ServiceCIDR "scope-a" (namespaces team=a), which holds 10.1.0.3, selects it again`, "recreate Service team-a/web without spec.clusterIP/clusterIPs"}},
		{name: "outside its scope, in an unscoped ServiceCIDR", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeOutOfScope, IP: "10.0.0.20", Service: "team-a/db"},
			standing: report.ByDesign,
			clear:    []string{"kubectl label namespace team-a", `no scope without fallback selects it, since 10.0.0.20 is in unscoped ServiceCIDR "kubernetes"`, "recreate Service team-a/db"}},
		{name: "outside its scope, in no ServiceCIDR any more", model: model.IPAddress,
			p:        report.Problem{Type: report.TypeOutOfScope, IP: "10.2.0.1", Service: "team-a/old"},
			standing: report.ByDesign,
			clear:    []string{"relabel namespace team-a", "recreate Service team-a/old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := &report.Report{Model: tc.model, Problems: []report.Problem{tc.p}}
			if err := explainByDesign(context.Background(), client, rep, rep.Model == model.IPAddress); err != nil {
				t.Fatal(err)
			}
			got := rep.Problems[0]
			if got.Standing() != tc.standing {
				t.Errorf("standing %v, want %v: %+v", got.Standing(), tc.standing, got)
			}
			if len(tc.clear) == 0 && got.Clear != "" {
				t.Errorf("Clear %q, want none", got.Clear)
			}
			rest := got.Clear
			for _, want := range tc.clear {
				i := strings.Index(rest, want)
				if i < 0 {
					t.Errorf("Clear lacks %q (in order): %q", want, got.Clear)
					break
				}
				rest = rest[i+len(want):]
			}
		})
	}
}

// TestExplainByDesignReadsOnlyWhatItNeeds: a report without a finding that
// may be by design costs no request.
func TestExplainByDesignReadsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	client := fake.NewClientset()
	rep := &report.Report{Model: model.IPAddress, Problems: []report.Problem{
		{Type: report.TypeDuplicate, IP: "10.0.0.1"}, {Type: report.TypeLeak, IP: "10.0.0.2", Fixed: true},
	}}
	if err := explainByDesign(context.Background(), client, rep, rep.Model == model.IPAddress); err != nil {
		t.Fatal(err)
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("%d requests: %v", n, client.Actions())
	}
}
