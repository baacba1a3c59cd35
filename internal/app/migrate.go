package app

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/repair"
)

type migrateOptions struct {
	cluster  clusterFlags
	to       string
	dryRun   bool
	output   string
	progress bool
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
2: problems left, 1: error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMigrate(cmd.Context(), o, streams)
		},
	}
	fs := cmd.Flags()
	o.cluster.addFlags(fs)
	fs.StringVar(&o.to, "to", "", "target model: ipaddress or bitmap (required)")
	fs.BoolVar(&o.dryRun, "dry-run", true, "report what would change and change nothing")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.BoolVar(&o.progress, "progress", false, "print progress to stderr (the default when stderr is a terminal)")
	return cmd
}

func runMigrate(ctx context.Context, o *migrateOptions, streams Streams) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	cfg := repair.MigrateConfig{Client: client, DryRun: o.dryRun}
	if o.progress || isTerminal(streams.Err) {
		cfg.Progress = streams.Err
	}
	var report *repair.MigrationReport
	switch o.to {
	case "ipaddress":
		report, err = repair.MigrateToIPAddress(ctx, cfg)
	case "bitmap":
		report, err = o.migrateToBitmap(ctx, client, cfg)
	default:
		return fmt.Errorf("--to must be ipaddress or bitmap, got %q", o.to)
	}
	if err != nil {
		return err
	}
	if o.output == "json" {
		err = writeJSON(streams.Out, newMigrationJSON(report))
	} else {
		err = writeProblems(streams.Out, report.Problems, report.DryRun, migrationSummary(report))
	}
	if err != nil {
		return err
	}
	if n := report.Unresolved(); n > 0 {
		return errProblemsLeft(n)
	}
	if !o.dryRun && !report.Verified {
		return &exitError{code: 2, msg: "the verification found the two views disagreeing; run again"}
	}
	return nil
}

func (o *migrateOptions) migrateToBitmap(ctx context.Context, client kubernetes.Interface, cfg repair.MigrateConfig) (*repair.MigrationReport, error) {
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
	return repair.MigrateToBitmap(ctx, cfg)
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

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}
