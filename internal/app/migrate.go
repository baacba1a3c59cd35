package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/progress"
	ipcontroller "github.com/allocator/allocator/pkg/ipallocator/controller"
)

type migrateOptions struct {
	cluster  clusterFlags
	to       string
	dryRun   bool
	output   string
	progress bool
	rerun    string // the command line that resumes an interrupted run
	command  string // the command's path, for pointers at its help
}

func newMigrateCommand(streams Streams, plugin bool) *cobra.Command {
	o := &migrateOptions{cluster: clusterFlags{plugin: plugin}}
	cmd := &cobra.Command{
		Use:   "migrate --to ipaddress|bitmap",
		Short: "Carry ClusterIP allocations over between the bitmap and the IPAddress model",
		Long: `Migrate carries the cluster's ClusterIP allocations from one model to the other.

--to ipaddress creates an IPAddress (parentRef = the Service) for every Service
address inside a ServiceCIDR. --to bitmap writes every IPAddress and Service
address into the RangeAllocation of its family, and refuses, writing nothing,
when an address cannot be represented there (an extra ServiceCIDR, or IPv6
beyond the bitmap's 65,535-address window).

It is idempotent and safe while servers allocate (create-if-absent claims,
compare-and-swap writes); a run killed half-way is resumed by running it again.
It ends with a verification that both views agree. By default it is a dry run:
pass --dry-run=false to change anything. Exit code 0: done (or nothing to do),
2: problems left, 1: error.

On a terminal it shows progress (done/total, rate, ETA) on one redrawn line;
--progress prints it as plain lines elsewhere (a Job's log). Ctrl-C (SIGINT)
stops it between two addresses, says how far it got, and exits 130; the same
command resumes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.rerun, o.command = rerunLine(cmd), cmd.CommandPath()
			return runMigrate(cmd.Context(), o, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addFlags(fs)
	fs.StringVar(&o.to, "to", "", "target model: ipaddress or bitmap (required)")
	fs.BoolVar(&o.dryRun, "dry-run", true, "report what would change and change nothing")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.BoolVar(&o.progress, "progress", false, "print progress to stderr: a redrawn line on a terminal (the default there), plain lines elsewhere")
	return cmd
}

func runMigrate(ctx context.Context, o *migrateOptions, streams Streams) error {
	if err := checkMigrateTarget(o.to, o.command); err != nil {
		return err
	}
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	if err := o.cluster.validate(); err != nil {
		return err
	}
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	cfg := ipcontroller.MigrateConfig{Client: client, DryRun: o.dryRun}
	if o.progress || isTerminal(streams.Err) {
		cfg.Progress = progress.Writer(streams.Err)
	}
	var rep *ipcontroller.MigrationReport
	switch o.to {
	case "ipaddress":
		rep, err = ipcontroller.MigrateToIPAddress(ctx, cfg)
	case "bitmap":
		rep, err = o.migrateToBitmap(ctx, client, cfg)
	}
	if err != nil {
		return interrupted(ctx, err, streams, o.rerun, migrationDone(o.to, rep))
	}
	if o.output == "json" {
		err = writeJSON(streams.Out, newMigrationJSON(rep))
	} else {
		err = writeProblems(streams.Out, rep.Problems, rep.DryRun, migrationSummary(rep))
	}
	if err != nil {
		return err
	}
	if n := rep.Unresolved(); n > 0 {
		return errProblemsLeft(n)
	}
	if !o.dryRun && !rep.Verified {
		return &exitError{code: 2, msg: "the verification found the two views disagreeing; run again"}
	}
	return nil
}

// checkMigrateTarget refuses a missing or unknown --to before anything is
// reached, pointing at the help of command (`allocator migrate`).
func checkMigrateTarget(to, command string) error {
	switch to {
	case "bitmap", "ipaddress":
		return nil
	case "":
		return fmt.Errorf("--to is required (bitmap or ipaddress); see %s --help", command)
	default:
		return fmt.Errorf("--to %q: must be bitmap or ipaddress; see %s --help", to, command)
	}
}

func (o *migrateOptions) migrateToBitmap(ctx context.Context, client kubernetes.Interface, cfg ipcontroller.MigrateConfig) (*ipcontroller.MigrationReport, error) {
	etcd, err := o.cluster.etcdClient(ctx)
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	fallback, err := defaultServiceCIDRs(ctx, client)
	if err != nil {
		return nil, err
	}
	if cfg.Stores, err = o.cluster.bitmapStores(ctx, etcd, fallback); err != nil {
		return nil, err
	}
	return ipcontroller.MigrateToBitmap(ctx, cfg)
}

// defaultServiceCIDRs returns the CIDRs of the ServiceCIDR "kubernetes" (the
// one kube-apiserver creates from --service-cluster-ip-range), or none.
func defaultServiceCIDRs(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	cidr, err := client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get ServiceCIDR kubernetes: %w", err)
	}
	return cidr.Spec.CIDRs, nil
}

// migrationDone says how far an interrupted migration got, and why stopping
// there is safe.
func migrationDone(to string, r *ipcontroller.MigrationReport) string {
	if to == "bitmap" || r == nil {
		// Each family's map is one compare-and-swap write: written whole or not at all.
		return "the migration stopped before it finished; each bitmap is written whole or not at all, so nothing is half-done."
	}
	verb := "created"
	if r.DryRun {
		verb = "would be created"
	}
	return fmt.Sprintf("%d IPAddresses %s, %d already present, before it stopped; each IPAddress is created whole, so nothing is half-done.", r.Created, verb, r.Present)
}
