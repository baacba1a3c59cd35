package app

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/rangeusage"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
)

// nodePorts measures the node-port range the way the repair reads it: the
// map at <prefix>/ranges/servicenodeports when etcd is given and holds one;
// otherwise the node ports the Services hold, listed through the API,
// against rng (--service-node-port-range).
func (o *statusOptions) nodePorts(ctx context.Context, client kubernetes.Interface, etcd *etcdConn, rng nodeport.Range) (*rangeusage.NodePorts, error) {
	if len(o.cluster.etcdServers) > 0 {
		kv, err := etcd.open(ctx)
		if err != nil {
			return nil, err
		}
		ports, found, err := rangeusage.NodePortsFromMap(ctx, kv, o.cluster.etcdPrefix, client)
		if err != nil || found {
			return ports, err
		}
	}
	return rangeusage.NodePortsFromServices(ctx, client, rng)
}

// nodePortsJSON is the node-port range's figures.
type nodePortsJSON struct {
	Range  string `json:"range"`
	Source string `json:"source"`
	bandJSON
	Static     bandJSON                    `json:"static"`
	Dynamic    bandJSON                    `json:"dynamic"`
	Outside    uint64                      `json:"outside"`
	Namespaces []rangeusage.NamespaceCount `json:"namespaces"`
	// Warning is the line the table prints when the range is nearly full.
	Warning string `json:"warning,omitempty"`
}

func newNodePortsJSON(n *rangeusage.NodePorts) *nodePortsJSON {
	if n == nil {
		return nil
	}
	j := &nodePortsJSON{Range: n.Range.String(), Source: n.Source, bandJSON: newBandJSON(n.Total()),
		Static: newBandJSON(n.Static), Dynamic: newBandJSON(n.Dynamic), Outside: n.Outside,
		Namespaces: n.Namespaces, Warning: nodePortsWarning(n)}
	if j.Namespaces == nil {
		j.Namespaces = []rangeusage.NamespaceCount{}
	}
	return j
}

// writeNodePortsTable prints, after an empty line, the node-port range's
// bands as the ClusterIP table prints a CIDR's, then where the counts come
// from and, when the range is nearly full, a warning.
func writeNodePortsTable(w io.Writer, n *rangeusage.NodePorts, top int) error {
	var table strings.Builder
	table.WriteString("\n")
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE PORTS\tBAND\tSIZE\tUSED\tFREE\tUSED%\tTOP NAMESPACES")
	for _, row := range []struct {
		band       string
		b          rangeusage.Band
		namespaces string
	}{
		{"static", n.Static, ""},
		{"dynamic", n.Dynamic, ""},
		{"all", n.Total(), formatNamespaces(n.Namespaces, top)},
	} {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", n.Range, row.band, row.b.Size, row.b.Used, row.b.Free(),
			formatPercent(row.b.Used, row.b.Percent()), row.namespaces)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	used := int(n.Total().Used)
	summary := fmt.Sprintf("node ports: %s allocated, read from %s in etcd", plural(used, "port", "ports"), n.Source)
	if n.Source == rangeusage.SourceServices {
		summary = fmt.Sprintf("node ports: %s held by Services, counted through the API against --service-node-port-range "+
			"(no etcd given; %s reads the map itself)", plural(used, "port", "ports"), etcdGivenBy)
	}
	if n.Outside > 0 {
		summary += fmt.Sprintf("; outside the range: %d (allocator repair reports them)", n.Outside)
	}
	if _, err := fmt.Fprintln(w, summary); err != nil {
		return err
	}
	if warning := nodePortsWarning(n); warning != "" {
		_, err := fmt.Fprintln(w, "WARNING: "+warning)
		return err
	}
	return nil
}

// etcdGivenBy names the flags that give a job etcd.
const etcdGivenBy = "--data-dir or --etcd-servers"

// nodePortsWarning says what happens when the node-port range is nearly
// full, and what to change; "" while it is not.
func nodePortsWarning(n *rangeusage.NodePorts) string {
	total := n.Total()
	if !total.NearlyFull() {
		return ""
	}
	return fmt.Sprintf("node ports %s are %s: a NodePort or LoadBalancer Service that asks for no particular port "+
		"fails with \"range is full\" when none is free; delete the Services that no longer need node ports, "+
		"or widen --service-node-port-range on every server", n.Range, fullness(total.Used, total.Percent(), fmt.Sprint(total.Free())))
}

// fullness words a nearly full range's fill: "full", or how much is
// allocated and how much is free.
func fullness(used uint64, percent float64, free string) string {
	if free == "0" {
		return "full"
	}
	return fmt.Sprintf("%s allocated (%s free)", formatPercent(used, percent), free)
}

// writeFamilyWarnings prints a WARNING line for each family whose service
// addresses are nearly full.
func writeFamilyWarnings(w io.Writer, u *rangeusage.Usage, growsByCIDRs bool) error {
	for _, f := range u.Families {
		if warning := familyWarning(f, growsByCIDRs); warning != "" {
			if _, err := fmt.Fprintln(w, "WARNING: "+warning); err != nil {
				return err
			}
		}
	}
	return nil
}

// familyWarning says what happens when a family's service addresses are
// nearly full, and what to change; "" while they are not. growsByCIDRs: the
// model allocates from ServiceCIDRs, so another one adds room.
func familyWarning(f rangeusage.Family, growsByCIDRs bool) string {
	if !f.NearlyFull() {
		return ""
	}
	advice := "delete Services that no longer need a ClusterIP, or move to the IPAddress model (allocator migrate --to ipaddress) and add a ServiceCIDR"
	if growsByCIDRs {
		advice = "add a ServiceCIDR, or delete Services that no longer need a ClusterIP"
	}
	return fmt.Sprintf("%s service addresses are %s: a Service that asks for no particular ClusterIP fails with \"range is full\" "+
		"when none is free; %s", f.Family, fullness(f.Used, f.Percent(), f.Free().String()), advice)
}
