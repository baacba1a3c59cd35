package apiserver

import (
	"context"
	"errors"
	"fmt"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/repair"
)

// startRepairController runs the repair controller of the server's model
// until the server stops: the bitmap repair over the RangeAllocations, or the
// IPAddress repair over IPAddresses and ServiceCIDRs. /readyz waits for its
// first successful pass (it retries failures with backoff and never stops).
// Allocators that keep no stored state (MemoryBitmapFactory) have nothing to
// repair; the check then passes at once.
func (s *Server) startRepairController(hc genericapiserver.PostStartHookContext) error {
	ctx := hc.Context
	if s.cfg.ManualRepair {
		close(s.repairFirstPass)
		return nil
	}
	client, err := kubernetes.NewForConfig(hc.LoopbackClientConfig)
	if err != nil {
		return fmt.Errorf("repair controller client: %w", err)
	}
	runner, err := s.newRepairController(ctx, client)
	if err != nil {
		return err
	}
	if runner == nil {
		close(s.repairFirstPass)
		return nil
	}
	go func() {
		if err := runner.Run(ctx, s.repairFirstPass); err != nil && ctx.Err() == nil {
			logger(ctx).Error(err, "ClusterIP repair controller stopped")
		}
	}()
	return nil
}

type repairRunner interface {
	Run(ctx context.Context, firstPass chan<- struct{}) error
}

func (s *Server) newRepairController(ctx context.Context, client kubernetes.Interface) (repairRunner, error) {
	recorder := repair.NewEventRecorder(ctx, client)
	switch s.cfg.Model {
	case ModelBitmap:
		stores, ok := s.bitmapStores()
		if !ok {
			logger(ctx).Info("Allocators keep no stored map; the bitmap repair controller does not run")
			return nil, nil
		}
		return repair.NewBitmapRepair(repair.BitmapConfig{
			Client: client, Stores: stores, Recorder: recorder, Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
		})
	case ModelIPAddress:
		return repair.NewIPAddressRepair(repair.IPAddressConfig{
			Client: client, Recorder: recorder, Metrics: s.repairMetrics, Interval: s.cfg.RepairInterval,
		})
	default:
		return nil, fmt.Errorf("repair controller: unknown model %q", s.cfg.Model)
	}
}

// bitmapStores returns the allocators as stored maps, if they all are.
func (s *Server) bitmapStores() ([]repair.BitmapStore, bool) {
	var stores []repair.BitmapStore
	for _, a := range s.allocators {
		store, ok := a.(repair.BitmapStore)
		if !ok {
			return nil, false
		}
		stores = append(stores, store)
	}
	return stores, true
}

// migrateFromOtherModel carries allocations made under the other model over
// before this server opens its allocators, so a server switched from one
// model to the other never hands out an address the old model gave away:
// the IPAddress model creates the missing IPAddresses of stored Services; the
// bitmap model writes every IPAddress and Service address into its maps.
// Addresses the target cannot hold are logged (repair reports them as
// events); they do not keep the server from starting.
func (s *Server) migrateFromOtherModel(ctx context.Context, client kubernetes.Interface) error {
	log := logger(ctx)
	var (
		report *repair.MigrationReport
		err    error
	)
	switch s.cfg.Model {
	case ModelIPAddress:
		report, err = repair.MigrateToIPAddress(ctx, repair.MigrateConfig{Client: client})
	case ModelBitmap:
		stores, ok := s.bitmapStores()
		if !ok {
			return nil
		}
		report, err = repair.MigrateToBitmap(ctx, repair.MigrateConfig{Client: client, Stores: stores, SkipUnrepresentable: true})
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("carry over allocations to the %s model: %w", s.cfg.Model, err)
	}
	if report.Created > 0 || len(report.Problems) > 0 {
		log.Info("Carried allocations over from the other model", "report", report.String())
	}
	for _, p := range report.Problems {
		log.Info("Allocation not carried over", "type", p.Type, "ip", p.IP, "service", p.Service, "message", p.Message)
	}
	if !report.Verified && len(report.Problems) == 0 {
		return errors.New("carry over allocations: the verification failed")
	}
	return nil
}
