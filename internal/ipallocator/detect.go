package ipallocator

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/bitmap/clusterip"
	"github.com/allocator/allocator/pkg/etcdlayout"
	"github.com/allocator/allocator/pkg/model"
)

// Detection is the model Detect resolved and what decided it.
type Detection struct {
	Model model.Name
	// Reason says, for an operator, what decided model.Auto; empty when
	// the model was named.
	Reason string
}

// Detected reports whether the model was resolved from model.Auto.
func (d Detection) Detected() bool { return d.Reason != "" }

func (d Detection) String() string {
	if !d.Detected() {
		return fmt.Sprintf("the %s model, as named", d.Model)
	}
	return fmt.Sprintf("the %s model, because %s", d.Model, d.Reason)
}

// Detect resolves n; any name but model.Auto is returned as is. Auto is the
// model the cluster's writers allocate from, decided by the first of these
// that holds:
//
//	etcd not given (nil)                                      as the API shows it (detectThroughAPI: an annotation
//	                                                          allocator serve sets, or whether ServiceCIDRs are served)
//	no ClusterIP RangeAllocation in etcd                      ipaddress
//	transition state stored with dual write off               ipaddress  (`allocator transition finish` retired the bitmap)
//	a bitmap-model replica record is live                     bitmap     (it allocates from the bitmap alone)
//	an IPAddress-model replica record is live                 ipaddress  (it dual-writes the bitmap and repairs it itself)
//	the API serves networking.k8s.io/v1 ServiceCIDRs          ipaddress  (kube-apiserver ≥ 1.33; its maps are left over)
//	otherwise                                                 bitmap     (kube-apiserver ≤ 1.32, or nothing to ask)
//
// The bitmap is chosen only when a writer may allocate from it alone: its
// repair judges every Service by the flag's range, so on a cluster that
// also serves other ServiceCIDRs it would call their Services out of range.
// client may be nil (the API is then not asked). Detect reads, never writes:
// a missing map is not created here, so a cluster is never moved to the
// bitmap model by looking at it.
func Detect(ctx context.Context, n model.Name, etcd *clientv3.Client, prefix string, client kubernetes.Interface) (Detection, error) {
	if n != model.Auto {
		return Detection{Model: n}, nil
	}
	var d Detection
	var err error
	if etcd == nil {
		d, err = detectThroughAPI(ctx, client)
	} else {
		d, err = detect(ctx, etcd, prefix, client)
	}
	if err != nil {
		return Detection{}, fmt.Errorf("detect the allocator model: %w", err)
	}
	return d, nil
}

func detect(ctx context.Context, etcd *clientv3.Client, prefix string, client kubernetes.Interface) (Detection, error) {
	layout := etcdlayout.Layout{Prefix: prefix}
	found, err := clusterip.IPMapExists(ctx, etcd, layout)
	if err != nil {
		return Detection{}, err
	}
	if !found {
		return Detection{Model: model.IPAddress, Reason: "etcd holds no ClusterIP RangeAllocation under " + layout.RangesPrefix()}, nil
	}
	state, stored, err := transition.ReadState(ctx, etcd, prefix)
	if err != nil {
		return Detection{}, err
	}
	if stored && !state.DualWrite {
		return Detection{Model: model.IPAddress, Reason: fmt.Sprintf("the bitmap is retired: dual write is off since %s (%s, by %s)",
			state.Changed.UTC().Format(time.RFC3339), state.Reason, state.By)}, nil
	}
	for _, m := range []model.Name{model.Bitmap, model.IPAddress} {
		records, err := transition.ListRecords(ctx, etcd, prefix, m)
		if err != nil {
			return Detection{}, err
		}
		if len(records) == 0 {
			continue
		}
		ids := make([]string, len(records))
		for i, r := range records {
			ids[i] = r.ID
		}
		if m == model.Bitmap {
			return Detection{Model: model.Bitmap, Reason: fmt.Sprintf("bitmap-model replicas are live (%s); they allocate from the bitmap alone",
				strings.Join(ids, ", "))}, nil
		}
		return Detection{Model: model.IPAddress, Reason: fmt.Sprintf("every live replica runs the IPAddress model (%s); "+
			"they dual-write the bitmap and repair it themselves", strings.Join(ids, ", "))}, nil
	}
	served, err := servesServiceCIDRs(ctx, client)
	if err != nil {
		return Detection{}, err
	}
	if served {
		return Detection{Model: model.IPAddress, Reason: "the API server serves networking.k8s.io/v1 ServiceCIDRs (the IPAddress model, " +
			"kube-apiserver 1.33 or later); the RangeAllocations are left from the bitmap model"}, nil
	}
	return Detection{Model: model.Bitmap, Reason: "ClusterIP RangeAllocations exist and no replica or ServiceCIDR API says otherwise " +
		"(the bitmap model, kube-apiserver 1.32 or earlier)"}, nil
}

// servesServiceCIDRs asks the API's discovery, which every authenticated
// client may read, whether it serves networking.k8s.io/v1 ServiceCIDRs.
// False when client is nil.
func servesServiceCIDRs(ctx context.Context, client kubernetes.Interface) (bool, error) {
	if client == nil {
		return false, nil
	}
	const groupVersion = "networking.k8s.io/v1"
	resources, err := client.Discovery().ServerResourcesForGroupVersionWithContext(ctx, groupVersion)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", groupVersion, err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "servicecidrs" {
			return true, nil
		}
	}
	return false, nil
}
