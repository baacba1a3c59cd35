package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/big"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/rangeusage"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/model"
)

type statusOptions struct {
	cluster       clusterFlags
	model         string
	output        string
	top           int
	nodePortRange string
}

func newStatusCommand(streams Streams, plugin bool) *cobra.Command {
	o := &statusOptions{cluster: clusterFlags{plugin: plugin, namespaced: true}}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show how full each service IP range and band is, and who holds the addresses",
		Long: `Status shows, per IP family, per service CIDR and per band, how many
addresses there are, how many are allocated and free, and which namespaces
hold the most. The static (lower) band is kept for user-chosen addresses:
min(max(16, size/16), 256) addresses; dynamic allocation uses the upper band
first.

In the IPAddress model it lists ServiceCIDRs and IPAddresses through the
Kubernetes API. In the bitmap model it reads the RangeAllocations from etcd
(--data-dir or --etcd-servers) and lists Services for their namespaces;
without etcd it counts the addresses the Services hold, on
--service-cluster-ip-range or else the ServiceCIDR "kubernetes". It only
reads: it is safe against a production cluster, ours or kube-apiserver's.
Sizes come from the CIDRs and counts from the objects, so an IPv6 /64 is
never iterated.

A second table shows the node ports, which both models share, read as the
repair reads them: the RangeAllocation servicenodeports in etcd, or, without
etcd (or without that map), the node ports the Services hold, counted
against --service-node-port-range. The line under it names the source. A
WARNING line follows a family's addresses, or the node ports, once they are
90% allocated or full.

--model auto (the default) measures the model the cluster's writers allocate
from, decided as for "allocator repair --model auto" (its help has the rules):
with etcd, from its maps and replica records; without it, through the API:
the model the ServiceCIDR "kubernetes" names (allocator serve annotates it),
the bitmap model when the API serves no ServiceCIDRs, else the IPAddress
model. -n NAMESPACE shows that namespace's share only (the totals stay the
cluster's).

A STATE column shows ServiceCIDRs that are draining or manual-only
(lifecycle.allocator.github.io/ annotations), and a line under the table
says how many Services still hold addresses in each draining one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), o, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addFlags(fs)
	fs.StringVar(&o.model, "model", "auto", "allocator model to measure: bitmap, ipaddress, or auto (the model the cluster's writers allocate from, as repair --help details)")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table, wide, "+machineFormats)
	fs.IntVar(&o.top, "top", 3, "how many of the largest namespaces to show per CIDR (table and wide)")
	fs.StringVar(&o.nodePortRange, "service-node-port-range", nodeport.Default,
		"the node ports to count the Services' against when etcd holds no node-port map or none is given")
	return cmd
}

func runStatus(ctx context.Context, o *statusOptions, streams Streams) error {
	if err := checkOutputFormat(o.output, "table", "wide"); err != nil {
		return err
	}
	portRange, err := nodeport.Parse(o.nodePortRange)
	if err != nil {
		return &usageError{fmt.Errorf("--service-node-port-range: %w", err)}
	}
	if err := o.cluster.validate(); err != nil {
		return err
	}
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	m, err := model.Parse(o.model, true)
	if err != nil {
		return err
	}
	// One etcd connection, opened when first needed: the model's detection
	// and maps, and the writers that ignore scopes.
	var etcd etcdConn
	defer etcd.close()
	backend, err := ipallocator.OpenExisting(ctx, o.cluster.ipCluster(m, client, &etcd))
	if err != nil {
		return explain(err)
	}
	usage, err := backend.Usage(ctx)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("status: the cluster serves no networking.k8s.io/v1 ServiceCIDRs (a kube-apiserver ≤ 1.32 is in the bitmap model): "+
			"give %s to read its maps (%w)", etcdGivenBy, err)
	}
	if err != nil {
		return fmt.Errorf("status: %w", explain(err))
	}
	ports, err := o.nodePorts(ctx, client, &etcd, portRange)
	if err != nil {
		return fmt.Errorf("status: node ports: %w", err)
	}
	if usage.Scoped() && len(o.cluster.etcdServers) > 0 {
		kv, err := etcd.open(ctx)
		if err != nil {
			return err
		}
		if usage.ScopesIgnoredBy, err = transition.WritersIgnoringScopes(ctx, kv, o.cluster.etcdPrefix, time.Now()); err != nil {
			return fmt.Errorf("status: %w", err)
		}
	}
	if ns := o.cluster.namespace(); ns != "" {
		for i := range usage.CIDRs {
			usage.CIDRs[i].Namespaces = onlyNamespace(usage.CIDRs[i].Namespaces, ns)
		}
		ports.Namespaces = onlyNamespace(ports.Namespaces, ns)
	}
	grows := backend.AllocatesFromServiceCIDRs()
	if isMachine(o.output) {
		doc := newStatusJSON(usage)
		for i, f := range usage.Families {
			doc.Families[i].Warning = familyWarning(f, grows)
		}
		doc.NodePorts = newNodePortsJSON(ports)
		return writeMachine(streams.Out, o.output, doc)
	}
	if err := writeStatusTable(streams.Out, usage, o.output == "wide", o.top); err != nil {
		return err
	}
	if err := writeFamilyWarnings(streams.Out, usage, grows); err != nil {
		return err
	}
	return writeNodePortsTable(streams.Out, ports, o.top)
}

func onlyNamespace(counts []rangeusage.NamespaceCount, ns string) []rangeusage.NamespaceCount {
	for _, c := range counts {
		if c.Namespace == ns {
			return []rangeusage.NamespaceCount{c}
		}
	}
	return []rangeusage.NamespaceCount{{Namespace: ns}}
}

// bandJSON is one band's (or one CIDR's) figures.
type bandJSON struct {
	Size    uint64  `json:"size"`
	Used    uint64  `json:"used"`
	Free    uint64  `json:"free"`
	Percent float64 `json:"percent"`
}

func newBandJSON(b rangeusage.Band) bandJSON {
	return bandJSON{Size: b.Size, Used: b.Used, Free: b.Free(), Percent: rangeusage.Round2(b.Percent())}
}

type cidrJSON struct {
	Family string `json:"family"`
	CIDR   string `json:"cidr"`
	Source string `json:"source"`
	Ready  bool   `json:"ready"`
	Scope  string `json:"scope,omitempty"`
	// Lifecycle is "draining" or "manual-only" (pkg/ipaddress/lifecycle); Services
	// counts the Services holding an address in the CIDR, given with a
	// lifecycle (a draining ServiceCIDR can go once it is 0).
	Lifecycle string  `json:"lifecycle,omitempty"`
	Services  *uint64 `json:"services,omitempty"`
	First     string  `json:"first,omitempty"`
	Last      string  `json:"last,omitempty"`
	bandJSON
	Static     bandJSON                    `json:"static"`
	Dynamic    bandJSON                    `json:"dynamic"`
	Namespaces []rangeusage.NamespaceCount `json:"namespaces"`
}

type familyJSON struct {
	Family string `json:"family"`
	// Size and Free are JSON numbers that may exceed 2^64 (several /64s).
	Size    *big.Int `json:"size"`
	Used    uint64   `json:"used"`
	Free    *big.Int `json:"free"`
	Percent float64  `json:"percent"`
	Outside uint64   `json:"outside"`
	// Warning is the line the table prints when the family is nearly full.
	Warning string `json:"warning,omitempty"`
}

type statusJSON struct {
	Model    string       `json:"model"`
	Families []familyJSON `json:"families"`
	CIDRs    []cidrJSON   `json:"cidrs"`
	// ScopesIgnoredBy: see rangeusage.Usage.
	ScopesIgnoredBy []string `json:"scopesIgnoredBy,omitempty"`
	// CountedFrom is "Services" when the addresses were counted from the
	// Services rather than read from the model's record (rangeusage.Usage).
	CountedFrom string `json:"countedFrom,omitempty"`
	// NodePorts is the node-port range's fill.
	NodePorts *nodePortsJSON `json:"nodePorts,omitempty"`
}

func newStatusJSON(u *rangeusage.Usage) statusJSON {
	out := statusJSON{Model: u.Model.String(), Families: []familyJSON{}, CIDRs: []cidrJSON{}, ScopesIgnoredBy: u.ScopesIgnoredBy,
		CountedFrom: u.CountedFrom}
	for _, f := range u.Families {
		out.Families = append(out.Families, familyJSON{Family: f.Family, Size: f.Size, Used: f.Used, Free: f.Free(),
			Percent: rangeusage.Round2(f.Percent()), Outside: f.Outside})
	}
	for _, c := range u.CIDRs {
		j := cidrJSON{Family: c.Family, CIDR: c.Prefix.String(), Source: c.Source, Ready: c.Ready, Scope: c.Scope,
			Lifecycle: c.Lifecycle,
			bandJSON:  newBandJSON(c.Total()), Static: newBandJSON(c.Static), Dynamic: newBandJSON(c.Dynamic),
			Namespaces: c.Namespaces}
		if c.First.IsValid() {
			j.First, j.Last = c.First.String(), c.Last.String()
		}
		if c.Lifecycle != "" {
			j.Services = &c.Services
		}
		if j.Namespaces == nil {
			j.Namespaces = []rangeusage.NamespaceCount{}
		}
		out.CIDRs = append(out.CIDRs, j)
	}
	return out
}

// formatPercent prints a fill with one decimal; a fill too small to show
// (a few addresses of a /64) is "<0.1%", never a misleading "0.0%".
func formatPercent(used uint64, p float64) string {
	if used > 0 && p < 0.05 {
		return "<0.1%"
	}
	return fmt.Sprintf("%.1f%%", p)
}

func formatNamespaces(counts []rangeusage.NamespaceCount, top int) string {
	var parts []string
	for i, c := range counts {
		if i == top {
			parts = append(parts, fmt.Sprintf("(+%d more)", len(counts)-top))
			break
		}
		parts = append(parts, fmt.Sprintf("%s=%d", c.Namespace, c.Used))
	}
	return strings.Join(parts, " ")
}

// writeStatusTable prints one row per band and CIDR, a row per family when
// it has several CIDRs, and a closing line.
func writeStatusTable(w io.Writer, u *rangeusage.Usage, wide bool, top int) error {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	// The SCOPE and STATE columns appear only when some ServiceCIDR is
	// scoped, or draining or manual-only.
	scoped, stated := u.Scoped(), u.HasLifecycle()
	scopeHeader := ""
	if scoped {
		scopeHeader = "\tSCOPE"
	}
	if stated {
		scopeHeader += "\tSTATE"
	}
	if wide {
		fmt.Fprintln(tw, "FAMILY\tCIDR\tSOURCE\tREADY\tFIRST\tLAST\tBAND\tSIZE\tUSED\tFREE\tUSED%\tTOP NAMESPACES"+scopeHeader)
	} else {
		fmt.Fprintln(tw, "FAMILY\tCIDR\tBAND\tSIZE\tUSED\tFREE\tUSED%\tTOP NAMESPACES"+scopeHeader)
	}
	perFamily := map[string]int{}
	for _, c := range u.CIDRs {
		perFamily[c.Family]++
	}
	row := func(c rangeusage.CIDR, band string, b rangeusage.Band, namespaces string) {
		if scoped {
			namespaces += "\t" + orDash(c.Scope)
		}
		if stated {
			namespaces += "\t" + orDash(c.Lifecycle)
		}
		if wide {
			first, last := "-", "-"
			if c.First.IsValid() {
				first, last = c.First.String(), c.Last.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", c.Family, c.Prefix, c.Source, c.Ready, first, last,
				band, b.Size, b.Used, b.Free(), formatPercent(b.Used, b.Percent()), namespaces)
			return
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", c.Family, c.Prefix, band, b.Size, b.Used, b.Free(), formatPercent(b.Used, b.Percent()), namespaces)
	}
	var used uint64
	var outside []string
	for _, f := range u.Families {
		for _, c := range u.CIDRs {
			if c.Family != f.Family {
				continue
			}
			row(c, "static", c.Static, "")
			row(c, "dynamic", c.Dynamic, "")
			row(c, "all", c.Total(), formatNamespaces(c.Namespaces, top))
		}
		if perFamily[f.Family] > 1 {
			if wide {
				fmt.Fprintf(tw, "%s\tall\t-\t-\t-\t-\tall\t%s\t%d\t%s\t%s\t\n", f.Family, f.Size, f.Used, f.Free(), formatPercent(f.Used, f.Percent()))
			} else {
				fmt.Fprintf(tw, "%s\tall\tall\t%s\t%d\t%s\t%s\t\n", f.Family, f.Size, f.Used, f.Free(), formatPercent(f.Used, f.Percent()))
			}
		}
		used += f.Used
		if f.Outside > 0 {
			outside = append(outside, fmt.Sprintf("%s %d", f.Family, f.Outside))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Rows with no namespaces would end in the padding of the last column.
	for line := range strings.Lines(table.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	summary := fmt.Sprintf("%s model: %s, %s allocated", u.Model, plural(len(u.CIDRs), "CIDR", "CIDRs"), plural(int(used), "address", "addresses"))
	if u.CountedFrom == rangeusage.SourceServices {
		summary = fmt.Sprintf("%s model: %s, %s held by Services, counted through the API (no etcd given; %s reads the bitmap itself)",
			u.Model, plural(len(u.CIDRs), "CIDR", "CIDRs"), plural(int(used), "address", "addresses"), etcdGivenBy)
	}
	if len(outside) > 0 {
		summary += fmt.Sprintf("; outside every CIDR: %s (allocator repair reports them)", strings.Join(outside, ", "))
	}
	if _, err := fmt.Fprintln(w, summary); err != nil {
		return err
	}
	if err := writeDrainingNote(w, u); err != nil {
		return err
	}
	if scoped {
		return writeScopeNote(w, u)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeDrainingNote says, for each draining CIDR, how many Services still
// hold addresses in it: the ServiceCIDR can be deleted once none does.
func writeDrainingNote(w io.Writer, u *rangeusage.Usage) error {
	for _, c := range u.CIDRs {
		if !strings.HasPrefix(c.Lifecycle, lifecycle.Draining.String()) {
			continue
		}
		var err error
		if c.Services == 0 {
			_, err = fmt.Fprintf(w, "%s %s is draining: no Service holds an address in it\n", c.Source, c.Prefix)
		} else {
			verb := "hold"
			if c.Services == 1 {
				verb = "holds"
			}
			_, err = fmt.Fprintf(w, "%s %s is draining: %s still %s addresses in it\n", c.Source, c.Prefix, plural(int(c.Services), "Service", "Services"), verb)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// writeScopeNote says who may break the scopes the table shows: the live
// writers that allocate without them, or that nobody checked.
func writeScopeNote(w io.Writer, u *rangeusage.Usage) error {
	var err error
	switch {
	case u.ScopesIgnoredBy == nil:
		_, err = fmt.Fprintln(w, "scopes are honoured by this server's IPAddress model only; give --etcd-servers to list writers that ignore them")
	case len(u.ScopesIgnoredBy) > 0:
		_, err = fmt.Fprintf(w, "WARNING: scopes are ignored by %s: Services they allocate for may get any address (allocator repair reports them as outOfScope)\n",
			strings.Join(u.ScopesIgnoredBy, ", "))
	}
	return err
}
