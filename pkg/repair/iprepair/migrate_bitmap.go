package iprepair

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/repair"
	"github.com/allocator/allocator/pkg/repair/report"
	"github.com/allocator/allocator/pkg/subrange"
)

// MigrateToBitmap carries the IPAddress model over to the bitmap model: each
// family's RangeAllocation becomes the union of what it holds and every
// IPAddress of that family. It refuses (reports, writes nothing) when an
// address cannot be represented: outside the bitmap window, e.g. in an extra
// ServiceCIDR or beyond the first 65,535 IPv6 addresses. The write is a CAS,
// so concurrent bitmap allocations are never lost; rerunning is harmless.
// Bits the union keeps that no Service holds are leaks, which the bitmap
// repair frees safely.
func MigrateToBitmap(ctx context.Context, cfg MigrateConfig) (_ *MigrationReport, err error) {
	start := time.Now()
	rep := &MigrationReport{Direction: ToBitmap, DryRun: cfg.DryRun}
	if len(cfg.Stores) == 0 {
		return nil, errors.New("migrate: no bitmap range configured")
	}
	// The maps are read before the lists: an address whose bit was set then
	// and is clear at the merge was released after the lists were taken (a
	// Service deleted meanwhile), and must not be set again — it would be
	// refused to the next static create until the repair frees it.
	before := make([]*clusterip.Allocator, len(cfg.Stores))
	for i, store := range cfg.Stores {
		if before[i], _, err = readBits(ctx, store); err != nil {
			return nil, err
		}
	}
	addrs, err := listIPAddresses(ctx, cfg.Client)
	if err != nil {
		return nil, err
	}
	services, err := report.ListServices(ctx, cfg.Client)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	rep.Services = len(services)
	owners := map[netip.Addr]string{}
	claims, problems := serviceClaims(services)
	rep.Problems = problems
	for _, c := range claims {
		owners[c.ip] = c.svc()
	}
	// Every Service address must be carried over; so must every IPAddress
	// (one whose Service is gone is a leak the bitmap repair will free).
	want := map[netip.Addr]string{}
	for _, a := range addrs {
		want[a] = owners[a]
	}
	for _, c := range claims {
		want[c.ip] = c.svc()
	}
	perStore := make([][]netip.Addr, len(cfg.Stores))
	for ip, svc := range want {
		i := slices.IndexFunc(cfg.Stores, func(s BitmapStore) bool { return s.Range().Contains(ip) })
		if i < 0 {
			rep.Problems = append(rep.Problems, report.Problem{Type: report.TypeOutOfRange, IP: ip.String(), Service: svc,
				Message: fmt.Sprintf("Cluster IP [%s]:%s cannot be represented in the bitmap model: it is outside %s", subrange.FamilyName(ip.Is6()), ip, storeRanges(cfg.Stores))})
			continue
		}
		perStore[i] = append(perStore[i], ip)
	}
	sortProblems(rep.Problems)
	if len(rep.Problems) > 0 && !cfg.SkipUnrepresentable {
		rep.Duration = time.Since(start)
		return rep, nil // refused: nothing written
	}
	progress := cfg.Progress.Start("bits", len(want))
	defer progress.Stop()
	for i, store := range cfg.Stores {
		created, present, kept, err := mergeIntoBitmap(ctx, store, perStore[i], before[i], cfg.DryRun)
		if err != nil {
			return nil, err
		}
		perStore[i] = kept
		rep.Created += created
		rep.Present += present
		progress.Add(created + present)
	}
	rep.Addresses = rep.Created + rep.Present
	if !cfg.DryRun {
		rep.Verified = true
		for i, store := range cfg.Stores {
			ok, err := bitmapHolds(ctx, store, perStore[i])
			if err != nil {
				return nil, err
			}
			rep.Verified = rep.Verified && ok
		}
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// readBits reads store's map into an in-memory allocator (empty when the key
// does not exist).
func readBits(ctx context.Context, store BitmapStore) (*clusterip.Allocator, bitmap.StoredMap, error) {
	stored, err := store.ReadStored(ctx)
	if err != nil {
		return nil, stored, fmt.Errorf("migrate: %w", err)
	}
	bits, err := clusterip.NewAllocator(store.Range())
	if err != nil {
		return nil, stored, err
	}
	if err := bits.Restore(store.Range().Prefix().String(), stored.Data); err != nil {
		return nil, stored, fmt.Errorf("migrate: %w", err)
	}
	return bits, stored, nil
}

// mergeIntoBitmap sets ips in store's map with a CAS write, rerun on
// conflict, except those set in before (the map read before ips were
// listed) and clear now: they were released since. kept are the addresses
// the map must now hold.
func mergeIntoBitmap(ctx context.Context, store BitmapStore, ips []netip.Addr, before *clusterip.Allocator, dryRun bool) (created, present int, kept []netip.Addr, err error) {
	for attempt := 1; attempt <= repair.MaxConflictReruns; attempt++ {
		merged, stored, err := readBits(ctx, store)
		if err != nil {
			return 0, 0, nil, err
		}
		created, present, kept = 0, 0, kept[:0]
		for _, ip := range ips {
			if before != nil {
				wasSet, _ := before.Has(ctx, ip)
				isSet, _ := merged.Has(ctx, ip)
				if wasSet && !isSet {
					continue // released after the lists were taken
				}
			}
			kept = append(kept, ip)
			if err := merged.Allocate(ctx, ip, allocation.Owner{}); err == nil {
				created++
			} else {
				present++
			}
		}
		_, data := merged.Snapshot()
		if dryRun || (stored.Exists() && bytes.Equal(data, stored.Data)) {
			return created, present, kept, nil
		}
		_, err = store.CompareAndWrite(ctx, data, stored)
		if errors.Is(err, bitmap.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, 0, nil, fmt.Errorf("migrate: %w", err)
		}
		return created, present, kept, nil
	}
	return 0, 0, nil, fmt.Errorf("migrate: %s: gave up after %d writes lost to concurrent allocations", store.Range().Prefix(), repair.MaxConflictReruns)
}

func bitmapHolds(ctx context.Context, store BitmapStore, ips []netip.Addr) (bool, error) {
	check, _, err := readBits(ctx, store)
	if err != nil {
		return false, fmt.Errorf("verify: %w", err)
	}
	for _, ip := range ips {
		if has, _ := check.Has(ctx, ip); !has {
			return false, nil
		}
	}
	return true, nil
}

// listIPAddresses lists every IPAddress name that is an address.
func listIPAddresses(ctx context.Context, client kubernetes.Interface) ([]netip.Addr, error) {
	objs, err := listIPAddressObjects(ctx, client)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	for name := range objs {
		if ip, err := subrange.ParseAddr(name); err == nil {
			addrs = append(addrs, ip)
		}
	}
	return addrs, nil
}

func storeRanges(stores []BitmapStore) string {
	var out []string
	for _, s := range stores {
		out = append(out, s.Range().String())
	}
	return fmt.Sprint(out)
}
