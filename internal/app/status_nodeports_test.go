package app

import (
	"bytes"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/allocator/allocator/internal/rangeusage"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/subrange"
)

// TestNodePortsTable: the node-port table's rows and the lines under it,
// per source and fill: where the counts come from, ports outside the
// range, and the warning once the range is 90% allocated or full.
func TestNodePortsTable(t *testing.T) {
	t.Parallel()
	rng := nodeport.MustParse("30000-30099") // static band: 16 ports
	ports := func(source string, static, dynamic, outside uint64) *rangeusage.NodePorts {
		return &rangeusage.NodePorts{Range: rng, Source: source, Outside: outside,
			Static: rangeusage.Band{Size: 16, Used: static}, Dynamic: rangeusage.Band{Size: 84, Used: dynamic},
			Namespaces: []rangeusage.NamespaceCount{{Namespace: "web", Used: static + dynamic}}}
	}
	const header = "\nNODE PORTS   BAND     SIZE  USED  FREE  USED%  TOP NAMESPACES\n"
	for _, tc := range []struct {
		name  string
		ports *rangeusage.NodePorts
		want  string
	}{
		{name: "map", ports: ports("RangeAllocation/servicenodeports", 1, 2, 0), want: header +
			"30000-30099  static   16    1     15    6.2%\n" +
			"30000-30099  dynamic  84    2     82    2.4%\n" +
			"30000-30099  all      100   3     97    3.0%   web=3\n" +
			"node ports: 3 ports allocated, read from RangeAllocation/servicenodeports in etcd\n"},
		{name: "services, one outside", ports: ports(rangeusage.SourceServices, 0, 1, 1), want: header +
			"30000-30099  static   16    0     16    0.0%\n" +
			"30000-30099  dynamic  84    1     83    1.2%\n" +
			"30000-30099  all      100   1     99    1.0%   web=1\n" +
			"node ports: 1 port held by Services, counted through the API against --service-node-port-range " +
			"(no etcd given; --data-dir or --etcd-servers reads the map itself); outside the range: 1 (allocator repair reports them)\n"},
		{name: "nearly full", ports: ports("RangeAllocation/servicenodeports", 10, 80, 0), want: header +
			"30000-30099  static   16    10    6     62.5%\n" +
			"30000-30099  dynamic  84    80    4     95.2%\n" +
			"30000-30099  all      100   90    10    90.0%  web=90\n" +
			"node ports: 90 ports allocated, read from RangeAllocation/servicenodeports in etcd\n" +
			"WARNING: node ports 30000-30099 are 90.0% allocated (10 free): a NodePort or LoadBalancer Service that asks for no " +
			"particular port fails with \"range is full\" when none is free; delete the Services that no longer need node ports, " +
			"or widen --service-node-port-range on every server\n"},
		{name: "full", ports: ports("RangeAllocation/servicenodeports", 16, 84, 0), want: "\nNODE PORTS   BAND     SIZE  USED  FREE  USED%   TOP NAMESPACES\n" +
			"30000-30099  static   16    16    0     100.0%\n" +
			"30000-30099  dynamic  84    84    0     100.0%\n" +
			"30000-30099  all      100   100   0     100.0%  web=100\n" +
			"node ports: 100 ports allocated, read from RangeAllocation/servicenodeports in etcd\n" +
			"WARNING: node ports 30000-30099 are full: a NodePort or LoadBalancer Service that asks for no " +
			"particular port fails with \"range is full\" when none is free; delete the Services that no longer need node ports, " +
			"or widen --service-node-port-range on every server\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := writeNodePortsTable(&out, tc.ports, 3); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			warning := newNodePortsJSON(tc.ports).Warning
			if (warning != "") != strings.Contains(tc.want, "WARNING") || !strings.Contains(tc.want, warning) {
				t.Errorf("JSON warning %q differs from the table's", warning)
			}
		})
	}
}

// TestFamilyWarning: a family's addresses warn from 90% allocated, with
// the advice of the model: another ServiceCIDR where the model allocates
// from them, the IPAddress model otherwise.
func TestFamilyWarning(t *testing.T) {
	t.Parallel()
	family := func(size int64, used uint64) rangeusage.Family {
		return rangeusage.Family{Family: subrange.IPv4, Size: big.NewInt(size), Used: used}
	}
	for _, tc := range []struct {
		name  string
		f     rangeusage.Family
		grows bool
		want  string
	}{
		{name: "room", f: family(254, 200), want: ""},
		{name: "nearly full, ServiceCIDRs", f: family(254, 240), grows: true, want: "IPv4 service addresses are 94.5% allocated (14 free): " +
			"a Service that asks for no particular ClusterIP fails with \"range is full\" when none is free; add a ServiceCIDR, " +
			"or delete Services that no longer need a ClusterIP"},
		{name: "full, bitmap", f: family(254, 254), want: "IPv4 service addresses are full: a Service that asks for no particular " +
			"ClusterIP fails with \"range is full\" when none is free; delete Services that no longer need a ClusterIP, or move to " +
			"the IPAddress model (allocator migrate --to ipaddress) and add a ServiceCIDR"},
	} {
		if got := familyWarning(tc.f, tc.grows); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
