package parity

import (
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/allocator/allocator/pkg/model"
)

// ipAddressModel marks cases that allocate from a ServiceCIDR created
// through the API: the bitmap model serves one range per family, fixed at
// start-up, as kube-apiserver's bitmap model did (design.md §7).
var ipAddressModel = []model.Name{model.IPAddress}

// serviceCIDRCases create, change and delete ServiceCIDRs, and allocate
// from added ones.
func serviceCIDRCases(f Family) []Case {
	cs := []Case{
		{Name: "servicecidr/get-default", Steps: steps(getCIDR("kubernetes"))},
		// The wait lets kube-controller-manager add its finalizer (ours is
		// added by the create): a delete then answers with the object,
		// still there until the controller lets it go.
		{Name: "servicecidr/v4", Steps: steps(createCIDR(cidr("x", "10.1.0.0/24")), getCIDR("x"), waitReady("x"), delCIDR("x"))},
		{Name: "servicecidr/v6", Steps: steps(createCIDR(cidr("x", "fd00:20::/120")), waitReady("x"), delCIDR("x"))},
		{Name: "servicecidr/dual", Steps: steps(createCIDR(cidr("x", "10.1.0.0/24", "fd00:20::/120")))},
		{Name: "servicecidr/dual-v6-first", Steps: steps(createCIDR(cidr("x", "fd00:20::/120", "10.1.0.0/24")))},
		{Name: "servicecidr/two-v4", Steps: steps(createCIDR(cidr("x", "10.1.0.0/24", "10.2.0.0/24")))},
		{Name: "servicecidr/three", Steps: steps(createCIDR(cidr("x", "10.1.0.0/24", "fd00:20::/120", "10.2.0.0/24")))},
		{Name: "servicecidr/none", Steps: steps(createCIDR(cidr("x")))},
		{Name: "servicecidr/host-bits", Steps: steps(createCIDR(cidr("x", "10.1.0.1/24")))},
		{Name: "servicecidr/leading-zero", Steps: steps(createCIDR(cidr("x", "010.1.0.0/24")))},
		{Name: "servicecidr/upper-case-v6", Steps: steps(createCIDR(cidr("x", "FD00:20::/120")))},
		{Name: "servicecidr/word", Steps: steps(createCIDR(cidr("x", "foo")))},
		{Name: "servicecidr/address", Steps: steps(createCIDR(cidr("x", "10.1.0.0")))},
		{Name: "servicecidr/v6-64", Steps: steps(createCIDR(cidr("x", "fd00:30::/64")))},
		{Name: "servicecidr/same-as-default", Steps: steps(createCIDR(cidr("x", rangeV4)))},
		{Name: "servicecidr/overlapping", Steps: steps(createCIDR(cidr("x", "10.0.0.0/8")))},
		{Name: "servicecidr/bad-name", Steps: steps(createCIDR(cidr("X_Y", "10.1.0.0/24")))},
		{Name: "servicecidr/change-cidr", Steps: steps(
			createCIDR(cidr("x", "10.1.0.0/24")),
			waitReady("x"),
			updateCIDR("x", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = []string{"10.3.0.0/24"} }))},
		{Name: "servicecidr/add-secondary", Steps: steps(
			createCIDR(cidr("x", "10.1.0.0/24")),
			waitReady("x"),
			updateCIDR("x", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = append(c.Spec.CIDRs, "fd00:20::/120") }),
			getCIDR("x"))},
		{Name: "servicecidr/remove-one", Steps: steps(
			createCIDR(cidr("x", "10.1.0.0/24", "fd00:20::/120")),
			waitReady("x"),
			updateCIDR("x", func(c *networkingv1.ServiceCIDR) { c.Spec.CIDRs = c.Spec.CIDRs[:1] }))},
		{Name: "servicecidr/labels-patch", Steps: steps(
			createCIDR(cidr("x", "10.1.0.0/24")),
			waitReady("x"),
			patchCIDR("x", types.MergePatchType, `{"metadata":{"labels":{"a":"b"}}}`))},
		{Name: "servicecidr/delete-missing", Steps: steps(delCIDR("x"))},
		{Name: "servicecidr/allocate-from-added", Models: ipAddressModel, Steps: steps(
			createCIDR(cidr("x", "10.1.0.0/24", "fd00:20::/120")),
			waitReady("x"),
			create(svc("s", ips("10.1.0.5"))),
			create(svc("t", ips("fd00:20::5"))),
			get("s"))},
		{Name: "servicecidr/outside-any-cidr", Steps: steps(
			create(svc("s", ips("10.9.0.5"))))},
	}
	// Each case's ServiceCIDR gets its own name: a deleted one lingers for
	// the ServiceCIDR controller's grace period (10 s, as upstream's), and
	// the runner does not wait it out between cases.
	for i := range cs {
		for j := range cs[i].Steps {
			st := &cs[i].Steps[j]
			if st.Kind != KindServiceCIDR || st.Name != "x" {
				continue
			}
			st.Name = fmt.Sprintf("x%d", i)
			if st.CIDR != nil {
				st.CIDR = st.CIDR.DeepCopy()
				st.CIDR.Name = st.Name
			}
		}
	}
	return cs
}

// waitReady lets the controllers finish with a new ServiceCIDR before the
// next step, so an update does not race them for the resourceVersion.
func waitReady(name string) Step { return Step{Op: OpWaitReady, Kind: KindServiceCIDR, Name: name} }
