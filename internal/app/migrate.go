package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/allocator/allocator/internal/ipallocator"
	"github.com/allocator/allocator/internal/progress"
	"github.com/allocator/allocator/pkg/model"
	"github.com/allocator/allocator/pkg/repair/iprepair"
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
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table, "+machineFormats)
	fs.BoolVar(&o.progress, "progress", false, "print progress to stderr: a redrawn line on a terminal (the default there), plain lines elsewhere")
	return cmd
}

func runMigrate(ctx context.Context, o *migrateOptions, streams Streams) error {
	to, err := checkMigrateTarget(o.to, o.command)
	if err != nil {
		return err
	}
	if err := checkOutputFormat(o.output, "table"); err != nil {
		return err
	}
	if err := o.cluster.validate(); err != nil {
		return err
	}
	client, err := o.cluster.kubeClient()
	if err != nil {
		return err
	}
	cfg := iprepair.MigrateConfig{Client: client, DryRun: o.dryRun}
	if o.progress || isTerminal(streams.Err) {
		cfg.Progress = progress.Writer(streams.Err)
	}
	var etcd etcdConn
	defer etcd.close()
	rep, err := ipallocator.Migrate(ctx, to, o.cluster.ipCluster(to, client, &etcd), cfg)
	if err != nil {
		return interrupted(ctx, explain(err), streams, o.rerun, rep.Interrupted())
	}
	if isMachine(o.output) {
		err = writeMachine(streams.Out, o.output, newMigrationJSON(rep))
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

// checkMigrateTarget reads --to, refusing a missing or unknown one before
// anything is reached, pointing at the help of command (`allocator migrate`).
func checkMigrateTarget(to, command string) (model.Name, error) {
	if to == "" {
		return "", fmt.Errorf("--to is required (%s or %s); see %s --help", model.Bitmap, model.IPAddress, command)
	}
	m, err := model.Parse(to, false)
	if err != nil {
		return "", fmt.Errorf("--to %q: must be %s or %s; see %s --help", to, model.Bitmap, model.IPAddress, command)
	}
	return m, nil
}
