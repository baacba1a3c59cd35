package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/holding"
	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/repair/iprepair"
)

type transitionOptions struct {
	cluster clusterFlags
	output  string
	force   bool
	wait    time.Duration
}

// transitionAction is what finish and resume do before the state is shown;
// say is where their one-line reports go.
type transitionAction func(ctx context.Context, o *transitionOptions, etcd *clientv3.Client, say io.Writer) error

func newTransitionCommand(streams Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transition",
		Short: "Show, end or resume the switch between the bitmap and the IPAddress model",
		Long: `While bitmap-model writers may be live (bitmap-model replicas of this server, or a
kube-apiserver up to 1.33), IPAddress-model replicas dual-write: every address is
claimed in the bitmap as well as by its IPAddress object. The state is stored in
etcd and read by every replica.`,
		// An unknown action is an error, not a silent help text.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTransitionStatusCommand(streams), newTransitionFinishCommand(streams), newTransitionResumeCommand(streams))
	return cmd
}

func newTransitionStatusCommand(streams Streams) *cobra.Command {
	o := &transitionOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the state, the live replicas of each model and the live kube-apiserver identity leases",
		Long: `Status shows the transition state, the live replicas of each model and the live
kube-apiserver identity leases. It only reads etcd.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTransition(cmd.Context(), o, nil, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addEtcdFlags(fs)
	o.addOutputFlag(fs)
	// Accepted and unused, so that one set of connection flags works for
	// every transition command (scripts pass the same flags to all three).
	fs.String(clientcmd.RecommendedConfigPathFlag, "", "unused: status reads etcd only")
	_ = fs.MarkHidden(clientcmd.RecommendedConfigPathFlag)
	return cmd
}

func newTransitionFinishCommand(streams Streams) *cobra.Command {
	o := &transitionOptions{}
	cmd := &cobra.Command{
		Use:   "finish",
		Short: "End the transition: dual write off, the bitmap retired",
		Long: `Finish ends the transition: dual write off, the bitmap retired (kept, no longer
written). It is refused while a bitmap-model replica is live, while a
kube-apiserver identity lease is live (unless --force), or while a Service
address has no IPAddress yet (unless --force). A bitmap-model replica started
afterwards refuses to start. On a finished transition it changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTransition(cmd.Context(), o, finishTransition, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addKubeFlags(fs)
	o.cluster.addEtcdFlags(fs)
	o.addOutputFlag(fs)
	fs.BoolVar(&o.force, "force", false, "finish although kube-apiserver identity leases are live or Service addresses lack IPAddresses")
	return cmd
}

func newTransitionResumeCommand(streams Streams) *cobra.Command {
	o := &transitionOptions{}
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Turn dual write on again and bring the bitmap up to date",
		Long: `Resume turns dual write on again, waits until every live IPAddress-model
replica dual-writes, then writes every IPAddress and Service address into the
bitmap. Run it before starting a bitmap-model replica or a kube-apiserver up to
1.33 on a cluster whose transition was finished.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTransition(cmd.Context(), o, resumeTransition, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addFlags(fs)
	o.addOutputFlag(fs)
	fs.DurationVar(&o.wait, "wait", 2*time.Minute, "how long to wait for the IPAddress-model replicas to dual-write")
	return cmd
}

func (o *transitionOptions) addOutputFlag(fs *pflag.FlagSet) {
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table, "+machineFormats)
}

// runTransition runs act, if any, then shows the transition's status.
func runTransition(ctx context.Context, o *transitionOptions, act transitionAction, streams Streams) error {
	if err := checkOutputFormat(o.output, "table"); err != nil {
		return err
	}
	if err := o.cluster.validate(); err != nil {
		return err
	}
	etcd, err := o.cluster.etcdClient(ctx)
	if err != nil {
		return err
	}
	defer etcd.Close()
	// With a machine format, standard output holds the document only.
	say := streams.Out
	if isMachine(o.output) {
		say = streams.Err
	}
	if act != nil {
		if err := act(ctx, o, etcd, say); err != nil {
			return err
		}
	}
	status, err := transition.ReadStatus(ctx, etcd, o.cluster.etcdPrefix)
	if err != nil {
		return err
	}
	if isMachine(o.output) {
		return writeMachine(streams.Out, o.output, status)
	}
	return writeTransitionStatus(streams.Out, status)
}

// finishTransition turns dual write off, unless it is off already: a second
// finish would only rewrite when and by whom it was turned off.
func finishTransition(ctx context.Context, o *transitionOptions, etcd *clientv3.Client, say io.Writer) error {
	prefix := o.cluster.etcdPrefix
	current, stored, err := transition.ReadState(ctx, etcd, prefix)
	if err != nil {
		return err
	}
	if stored && !current.DualWrite {
		fmt.Fprintf(say, "Transition already finished: %s; nothing changed.\n", current)
		return nil
	}
	// The live writers first: while they are, addresses keep arriving
	// without IPAddresses, and they are what must change.
	if err := transition.CheckNoBitmapWriters(ctx, etcd, prefix, o.force); err != nil {
		return err
	}
	if !o.force {
		client, err := o.cluster.kubeClient()
		if err != nil {
			return err
		}
		missing, err := addressesWithoutIPAddress(ctx, client)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d Service addresses have no IPAddress yet (%s): finishing now would let an IPAddress-model replica hand them out again; "+
				"run `allocator migrate --to ipaddress --dry-run=false` (or wait for the repair controller) and try again",
				len(missing), strings.Join(missing[:min(len(missing), 5)], ", "))
		}
	}
	state, err := transition.Finish(ctx, etcd, prefix, transition.FinishOptions{By: "allocator transition finish", Force: o.force})
	if err != nil {
		return err
	}
	fmt.Fprintf(say, "Transition finished: %s.\n", state)
	return nil
}

// resumeTransition turns dual write on, waits for the IPAddress-model
// replicas to act on it, and carries the IPAddresses into the bitmap.
func resumeTransition(ctx context.Context, o *transitionOptions, etcd *clientv3.Client, say io.Writer) error {
	prefix := o.cluster.etcdPrefix
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	state, err := transition.Resume(ctx, etcd, prefix, "allocator transition resume")
	if err != nil {
		return err
	}
	fmt.Fprintf(say, "Dual write turned on (state revision %d); waiting for the IPAddress-model replicas...\n", state.Revision)
	wctx, cancel := context.WithTimeout(ctx, o.wait)
	err = transition.WaitForDualWriters(wctx, etcd, prefix, 0)
	cancel()
	if err != nil {
		return err
	}
	fallback, err := ipallocator.DefaultServiceCIDRs(ctx, client)
	if err != nil {
		return err
	}
	stores, err := ipallocator.ExistingBitmapStores(ctx, etcd, prefix, o.cluster.ranges(), fallback)
	if err != nil {
		return err
	}
	if len(stores) == 0 {
		return errors.New("no service range known: pass --service-cluster-ip-range")
	}
	for _, s := range stores {
		if init, ok := s.(interface {
			Initialize(context.Context) (bool, error)
		}); ok {
			if _, err := init.Initialize(ctx); err != nil {
				return fmt.Errorf("create the bitmap: %w", err)
			}
		}
	}
	rep, err := iprepair.MigrateToBitmap(ctx, iprepair.MigrateConfig{Client: client, Stores: stores, SkipUnrepresentable: true})
	if err != nil {
		return fmt.Errorf("carry the IPAddresses into the bitmap: %w", err)
	}
	fmt.Fprintf(say, "Every IPAddress-model replica dual-writes; bitmap brought up to date: %s\n", rep.String())
	return nil
}

func writeTransitionStatus(w io.Writer, st *transition.Status) error {
	switch {
	case !st.Stored:
		fmt.Fprintln(w, "State: none stored yet (the first replica to start decides)")
	default:
		fmt.Fprintf(w, "State: %s\n", st.State)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tMODEL\tDUAL-WRITE\tSTATE-REVISION\tHOST\tPID\tSTARTED")
	recs := slices.Clone(st.Replicas)
	slices.SortFunc(recs, func(a, b transition.Record) int { return strings.Compare(a.ID, b.ID) })
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%s\t%d\t%s\n", r.ID, r.Model, r.DualWrite, r.StateRevision, r.Host, r.PID, r.Started.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range st.APIServers {
		fmt.Fprintf(w, "Live kube-apiserver identity lease: %s (holder %s, renewed %s)\n", a.Name, a.Holder, a.Renewed.Format(time.RFC3339))
	}
	return nil
}

// addressesWithoutIPAddress lists "ip (namespace/name)" for every Service
// address that has no IPAddress object.
func addressesWithoutIPAddress(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	ips, err := client.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list IPAddresses: %w", err)
	}
	have := make(map[netip.Addr]bool, len(ips.Items))
	for _, o := range ips.Items {
		if ip, err := netip.ParseAddr(o.Name); err == nil {
			have[ip] = true
		}
	}
	services, err := client.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Services: %w", err)
	}
	var missing []string
	for _, svc := range services.Items {
		for _, ip := range holding.IPs(&svc) {
			if !have[ip] {
				missing = append(missing, fmt.Sprintf("%s (%s/%s)", ip, svc.Namespace, svc.Name))
			}
		}
	}
	return missing, nil
}
