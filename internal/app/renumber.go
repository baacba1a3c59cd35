package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/progress"
	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/pkg/ipaddress/lifecycle"
	"github.com/allocator/allocator/pkg/model"
)

type renumberOptions struct {
	cluster         clusterFlags
	from, to        string
	dryRun          bool
	batch           int
	allNamespaces   bool
	selector        string
	journal         string
	output          string
	progress        bool
	recreateInDoubt bool
	keepOffsets     bool
	rerun           string // the command line that resumes an interrupted run
	command         string // the command's path, for pointers at its help
}

func newRenumberCommand(streams Streams, plugin bool) *cobra.Command {
	o := &renumberOptions{cluster: clusterFlags{plugin: plugin, namespaced: true}}
	cmd := &cobra.Command{
		Use:   "renumber --from SERVICECIDR [--to SERVICECIDR] [--dry-run=false]",
		Short: "Move the Services of a draining ServiceCIDR to new ClusterIPs",
		Long: `Renumber lists the Services holding a ClusterIP inside the ServiceCIDR named
by --from, which must be draining (` + lifecycle.DrainingAnnotation + `=true),
and moves them: each one is deleted and created again with the same name,
labels, annotations, finalizers, owner references and spec, and a new
ClusterIP in the families inside --from (a dual-stack Service keeps its
other family's address). The new address is the server's pick among the
ranges the Service may use, or, with --to, a free address of that
ServiceCIDR. Clients see a new ClusterIP: DNS follows, connections to the
old address break.

A ClusterIP in the static band of --from (its lower min(max(16, size/16),
256) addresses, where user-chosen ones such as kube-dns's 10.96.0.10 live)
keeps its offset: 10.96.0.10 of 10.96.0.0/16 becomes 10.100.0.10 of
10.100.0.0/16, in --to or, without it, in the range the server picks from
for that Service. The dry run lists these addresses. When the offset is
beyond that range or its address is held, the Service is left and reported
(exit 2); --keep-static-offsets=false moves it to any free address. Move
kube-system/kube-dns together with the kubelets' clusterDNS (see
docs/operations.md, "Replacing the default range").

By default it is a dry run that lists the Services and their addresses,
each re-create checked by a server-side dry run: pass --dry-run=false to
move them. Like kubectl it works in the context's
namespace; -n picks another, -A every namespace, -l narrows by label.
It works through the Kubernetes API; the bitmap model is refused. A
kube-apiserver does not know the draining annotation and may pick an address
in --from again: give it --to.

Services are moved --batch at a time. Before a Service is deleted, what
re-creates it is written and synced to --journal; a run killed between a
delete and its create is resumed by running the same command again, which
first re-creates the Services the killed run deleted. A Service someone else
deleted meanwhile is reported and left deleted; one whose delete was in
flight at the kill is reported in doubt (exit 2) and re-created only with
--recreate-in-doubt. The journal is removed when nothing is pending. Each re-create is first checked
with a server-side dry run, and its delete is conditional on the Service's
UID and resourceVersion: a Service the API would refuse, one that changed
meanwhile, and one with finalizers are reported and left untouched. The API
server's own default/kubernetes is never moved (see docs/operations.md,
"Replacing the default range").

It ends with a verification: every re-created Service exists with its spec,
outside --from, each address an IPAddress naming it. Exit code 0: done (or
nothing to do), 2: Services left or in doubt, a node port, kept address or
static-band offset changed (taken by another create while the Service was gone), or the verification
found problems, 1:
error, 130: interrupted (Ctrl-C stops it between two Services).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.rerun, o.command = rerunLine(cmd), cmd.CommandPath()
			return runRenumber(cmd.Context(), o, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addKubeFlags(fs)
	o.cluster.addEtcdFlags(fs)
	if f := fs.Lookup(clientcmd.FlagNamespace); f != nil && !plugin {
		f.Usage = "Move the Services of this namespace (default: the kubeconfig context's namespace)."
	}
	fs.StringVar(&o.from, "from", "", "the draining ServiceCIDR to empty (required)")
	fs.StringVar(&o.to, "to", "", "the ServiceCIDR every new address comes from (default: the server's pick)")
	fs.BoolVar(&o.dryRun, "dry-run", true, "list the Services that would move and change nothing")
	fs.IntVar(&o.batch, "batch", renumber.DefaultBatch, "how many Services to move at a time")
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "move the Services of every namespace")
	fs.StringVarP(&o.selector, "selector", "l", "", "move only the Services this label selector matches (e.g. -l app=web)")
	fs.StringVar(&o.journal, "journal", "", "the file that records each Service before its delete (default: allocator-renumber-<from>.journal in the current directory)")
	fs.BoolVar(&o.recreateInDoubt, "recreate-in-doubt", false, "re-create the journal's Services that are gone while a killed run's delete of them was in flight, when it cannot be told whether that delete or another client's removed them (by default they are reported, exit 2, and kept in the journal)")
	fs.BoolVar(&o.keepOffsets, "keep-static-offsets", true, "keep the offset of each ClusterIP in --from's static band (10.96.0.10 -> 10.100.0.10), or leave the Service; false moves it to any free address")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table, "+machineFormats)
	fs.BoolVar(&o.progress, "progress", false, "print progress to stderr: a redrawn line on a terminal (the default there), plain lines elsewhere")
	return cmd
}

// config checks the flags and builds the run's configuration, without
// its client and journal.
func (o *renumberOptions) config() (renumber.Config, error) {
	var cfg renumber.Config
	if o.from == "" {
		return cfg, &usageError{fmt.Errorf("--from is required: the draining ServiceCIDR to empty; see %s --help", o.command)}
	}
	if o.batch <= 0 {
		return cfg, &usageError{fmt.Errorf("--batch %d: must be at least 1", o.batch)}
	}
	if err := checkOutputFormat(o.output, "table"); err != nil {
		return cfg, err
	}
	if o.allNamespaces && o.cluster.namespace() != "" {
		return cfg, &usageError{errors.New("-n and -A: give one")}
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return cfg, &usageError{fmt.Errorf("--selector %q: %w", o.selector, err)}
	}
	if o.journal == "" {
		o.journal = "allocator-renumber-" + o.from + ".journal"
	}
	if o.journal, err = filepath.Abs(o.journal); err != nil {
		return cfg, fmt.Errorf("--journal: %w", err)
	}
	return renumber.Config{From: o.from, To: o.to, DryRun: o.dryRun, Batch: o.batch,
		Filter: renumber.Filter{Selector: sel}, JournalPath: o.journal, RecreateInDoubt: o.recreateInDoubt,
		IgnoreStaticBand: !o.keepOffsets}, nil
}

// namespace is -n, else the kubeconfig context's namespace, else
// "default"; "" with -A.
func (o *renumberOptions) namespace() (string, error) {
	if o.allNamespaces {
		return "", nil
	}
	if ns := o.cluster.namespace(); ns != "" {
		return ns, nil
	}
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.cluster.kube, &o.cluster.overrides).Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	return ns, nil
}

func runRenumber(ctx context.Context, o *renumberOptions, streams Streams) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	if err := o.cluster.validate(); err != nil {
		return err
	}
	client, err := o.cluster.kubeClient(renumber.CaptureWarnings)
	if err != nil {
		return err
	}
	if cfg.Filter.Namespace, err = o.namespace(); err != nil {
		return err
	}
	if err := checkIPAddressModel(ctx, o, client); err != nil {
		return err
	}
	cfg.Client = client
	if o.progress || isTerminal(streams.Err) {
		cfg.Progress = progress.Writer(streams.Err)
	}
	if !o.dryRun {
		if cfg.Journal, err = renumber.OpenJournal(o.journal); err != nil {
			return err
		}
		fmt.Fprintf(streams.Err, "journal: %s (the same command resumes from it)\n", o.journal)
	}
	res, err := renumber.Run(ctx, cfg)
	if cfg.Journal != nil {
		if removed, cerr := cfg.Journal.Close(); cerr != nil && err == nil {
			err = cerr
		} else if !removed {
			fmt.Fprintf(streams.Err, "journal %s kept: it holds Services deleted and not re-created\n", o.journal)
		}
	}
	if err != nil {
		return interrupted(ctx, renumberError(err), streams, o.rerun,
			fmt.Sprintf("Services are moved one at a time and each is journalled in %s before its delete, so none is lost.", o.journal))
	}
	if isMachine(o.output) {
		err = writeMachine(streams.Out, o.output, res)
	} else {
		err = writeRenumber(streams.Out, res)
	}
	if err != nil {
		return err
	}
	return renumberExit(res)
}

// checkIPAddressModel refuses the bitmap model, detected as the other
// commands detect it: from etcd's maps and replica records when etcd is
// given, else through the API (the model the ServiceCIDR "kubernetes"
// names, or no ServiceCIDR API at all). internal/renumber also refuses a
// range whose Services hold no IPAddress.
func checkIPAddressModel(ctx context.Context, o *renumberOptions, client kubernetes.Interface) error {
	var etcd etcdConn
	defer etcd.close()
	backend, err := ipallocator.OpenExisting(ctx, o.cluster.ipCluster(model.Auto, client, &etcd))
	if err != nil {
		return explain(err)
	}
	if !backend.AllocatesFromServiceCIDRs() {
		return fmt.Errorf("renumber needs the IPAddress model: this cluster allocates ClusterIPs in the bitmap model, which serves "+
			"--service-cluster-ip-range only and has no ServiceCIDR to drain (detected: %s)", backend.Detection())
	}
	return nil
}

// renumberError words what the run refuses for the command line.
func renumberError(err error) error {
	if apierrors.IsNotFound(err) && strings.Contains(err.Error(), "could not find the requested resource") {
		return fmt.Errorf("%w (the cluster serves no networking.k8s.io/v1 ServiceCIDRs: renumber needs the IPAddress model)", err)
	}
	return err
}

// renumberExit is 2 when Services were left (the API server's own aside),
// are pending, lost a node port or kept address they held, or the
// verification found problems.
func renumberExit(res *renumber.Result) error {
	var left []string
	for _, m := range res.Moves {
		if (m.Outcome == renumber.Left && !isAPIServerMove(m)) || m.Outcome == renumber.Pending || m.Outcome == renumber.InDoubt {
			left = append(left, m.Key())
		}
	}
	if len(left) > 0 {
		return &exitError{code: 2, msg: fmt.Sprintf("%s not moved: %s", plural(len(left), "Service", "Services"), strings.Join(left, ", "))}
	}
	var changed []string
	for _, m := range res.Moves {
		if m.Outcome == renumber.Changed {
			changed = append(changed, m.Key())
		}
	}
	if len(changed) > 0 {
		return &exitError{code: 2, msg: fmt.Sprintf("%s moved with a node port, kept address or static-band offset changed: %s", plural(len(changed), "Service", "Services"), strings.Join(changed, ", "))}
	}
	if !res.DryRun && !res.Verified {
		return &exitError{code: 2, msg: fmt.Sprintf("the verification found %s", plural(len(res.Problems), "problem", "problems"))}
	}
	return nil
}

func isAPIServerMove(m renumber.Move) bool { return m.Namespace == "default" && m.Name == "kubernetes" }

// writeRenumber prints one row per Service, the reasons of those left, the
// verification's problems and a summary.
func writeRenumber(w io.Writer, res *renumber.Result) error {
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 4, 2, ' ', 0)
	if len(res.Moves) > 0 {
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tCLUSTER-IPS\tNEW CLUSTER-IPS\tRESULT")
	}
	var notes []string
	for _, m := range res.Moves {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Namespace, m.Name, strings.Join(m.OldIPs, ","), orDash(strings.Join(m.NewIPs, ",")), m.Outcome)
		if m.Reason != "" {
			notes = append(notes, fmt.Sprintf("%s %s: %s", m.Key(), m.Outcome, m.Reason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " \n")); err != nil {
			return err
		}
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	for _, m := range res.Moves {
		if len(m.Offsets) > 0 {
			fmt.Fprintf(w, "%s %s its static-band offset: %s\n", m.Key(), keepsVerb(res), offsetsText(m.Offsets))
		}
	}
	for _, p := range res.Problems {
		fmt.Fprintln(w, "verification: "+p)
	}
	_, err := fmt.Fprintln(w, renumberSummary(res))
	return err
}

func renumberSummary(res *renumber.Result) string {
	from := fmt.Sprintf("ServiceCIDR %s (%s)", res.From, strings.Join(res.FromCIDRs, ","))
	var parts []string
	if res.DryRun {
		parts = append(parts, fmt.Sprintf("dry run: %s would move out of %s", plural(res.Count(renumber.WouldMove), "Service", "Services"), from))
	} else {
		moved := res.Count(renumber.Moved)
		rate := ""
		if s := res.Duration.Seconds(); s > 0 && moved > 0 {
			rate = fmt.Sprintf(" (%.1f/s)", float64(moved)/s)
		}
		parts = append(parts, fmt.Sprintf("%s moved out of %s in %v%s", plural(moved, "Service", "Services"), from, res.Duration.Round(time.Millisecond), rate))
		if n := res.Count(renumber.Resumed); n > 0 {
			parts = append(parts, fmt.Sprintf("%d re-created from the journal", n))
		}
	}
	if n := res.Count(renumber.Left); n > 0 {
		parts = append(parts, fmt.Sprintf("%d left", n))
	}
	if n := res.Count(renumber.Pending); n > 0 {
		parts = append(parts, fmt.Sprintf("%d deleted and not re-created", n))
	}
	if n := res.Count(renumber.InDoubt); n > 0 {
		parts = append(parts, fmt.Sprintf("%d deleted in doubt and not re-created (--recreate-in-doubt)", n))
	}
	if n := res.Count(renumber.LeftDeleted); n > 0 {
		parts = append(parts, fmt.Sprintf("%d deleted by someone else and left deleted", n))
	}
	if res.Outside > 0 {
		parts = append(parts, fmt.Sprintf("%s in the range outside the selection (-A, -n and -l choose)", plural(res.Outside, "more Service", "more Services")))
	}
	if n := countOffsets(res); n > 0 {
		what := "their static-band offsets"
		if n == 1 {
			what = "its static-band offset"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", plural(n, "Service", "Services"), keepsVerb(res), what))
	}
	switch {
	case res.DryRun:
		parts = append(parts, "nothing changed; --dry-run=false moves them")
	case res.Verified:
		parts = append(parts, "verified")
	}
	return strings.Join(parts, "; ")
}

// keepsVerb is how the output says a Service keeps its offset: in a dry run
// it would.
func keepsVerb(res *renumber.Result) string {
	if res.DryRun {
		return "would keep"
	}
	return "kept"
}

// offsetsText is "10.96.0.10 -> 10.100.0.10 (offset 10)" per offset.
func offsetsText(offsets []renumber.Offset) string {
	parts := make([]string, len(offsets))
	for i, off := range offsets {
		parts[i] = fmt.Sprintf("%s -> %s (offset %d)", off.Old, off.New, off.N)
	}
	return strings.Join(parts, ", ")
}

// countOffsets counts the Services that keep a static-band offset.
func countOffsets(res *renumber.Result) int {
	n := 0
	for _, m := range res.Moves {
		if len(m.Offsets) > 0 {
			n++
		}
	}
	return n
}
