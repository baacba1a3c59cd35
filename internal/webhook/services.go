package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/apiserver/pkg/warning"

	"github.com/allocator/allocator/internal/webhook/drypick"
	"github.com/allocator/allocator/pkg/allocation"
	"github.com/allocator/allocator/pkg/bitmap/nodeport"
	"github.com/allocator/allocator/pkg/ipaddress"
	"github.com/allocator/allocator/pkg/servicealloc"
)

// admitService answers a Service CREATE or UPDATE. When the Service needs a
// ClusterIP it did not ask for (a create, or an update from ExternalName or
// headless, or to a second family), it picks one by the rules and code of
// `allocator serve` (servicealloc over the IPAddress allocators: scopes,
// lifecycle, the dynamic band first, the families as kube-apiserver
// defaults them) and patches spec.clusterIP(s) and the family fields in;
// kube-apiserver then allocates it as the user's choice. An address the
// user asked for is refused with serve's text when it lies in a draining
// range or outside the Service's scope. Everything else kube-apiserver
// judges itself: a Service it will refuse is let through unchanged, so the
// client gets kube-apiserver's own answer.
func (w *Webhook) admitService(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	svc := &corev1.Service{}
	if err := json.Unmarshal(req.Object.Raw, svc); err != nil {
		return errored(fmt.Errorf("decode the Service: %w", err))
	}
	if svc.Namespace == "" {
		svc.Namespace = req.Namespace
	}
	var old *corev1.Service
	if req.Operation == admissionv1.Update {
		old = &corev1.Service{}
		if err := json.Unmarshal(req.OldObject.Raw, old); err != nil {
			return errored(fmt.Errorf("decode the old Service: %w", err))
		}
	}
	// kube-apiserver defaults before its mutating admission; defaulting
	// again is harmless, and makes the webhook judge what will be stored.
	servicealloc.DefaultService(svc)
	if old != nil {
		servicealloc.DefaultService(old)
	}
	dryRun := req.DryRun != nil && *req.DryRun
	warnings := &recorder{}
	ctx = warning.WithWarningRecorder(ctx, warnings)
	record := &allocErrors{}
	ctx = withAllocErrors(ctx, record)

	picked := svc.DeepCopy()
	var err error
	if old == nil {
		// kube-apiserver names a generateName create after its admission:
		// the validation judges it under a name of that form, and the pick
		// is held for a Service without a name (holds.go).
		generated := picked.Name == "" && picked.GenerateName != ""
		if generated {
			picked.Name = names.SimpleNameGenerator.GenerateName(picked.GenerateName)
		}
		err = w.alloc.PrepareCreate(ctx, picked)
		if generated {
			picked.Name = ""
		}
	} else {
		err = w.alloc.PrepareUpdate(ctx, picked, old)
	}
	if err != nil {
		// Invalid: kube-apiserver refuses it with the same text itself.
		return allowed(warnings.texts)
	}
	// Neither Commit nor Revert follows: the addresses are held (holds.go)
	// until kube-apiserver's IPAddress is seen or the hold ends, and the
	// node ports were the pass-through's (passPorts), kube-apiserver's to
	// allocate.
	if old == nil {
		_, err = w.alloc.AllocateCreate(ctx, picked, dryRun)
	} else {
		_, err = w.alloc.AllocateUpdate(ctx, picked, old, dryRun)
	}
	if err != nil {
		return w.refusal(err, record, warnings.texts)
	}
	if dryRun {
		// kube-apiserver's dry run checks a requested address against one
		// of its ServiceCIDRs only, and refuses it when it lies in another:
		// it picks by its own rules here, and the warning says what the
		// create would get.
		if picks := pickedFor(svc, picked); len(picks) > 0 {
			warnings.texts = append(warnings.texts, drypick.Warning(picks))
		}
		return allowed(warnings.texts)
	}
	patch, err := familyPatch(svc, picked)
	if err != nil {
		return errored(err)
	}
	if patch == nil {
		return allowed(warnings.texts)
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt, Warnings: warnings.texts}
}

// pickedFor returns the addresses the webhook picked for svc: those of
// picked that svc did not ask for.
func pickedFor(svc, picked *corev1.Service) []string {
	asked := append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...)
	var out []string
	for _, text := range picked.Spec.ClusterIPs {
		if _, err := netip.ParseAddr(text); err == nil && !slices.Contains(asked, text) {
			out = append(out, text)
		}
	}
	return out
}

// refusal turns an allocation error into the answer: denied with serve's
// status when the webhook's rules refuse the Service (a draining range, a
// scope it may not use, no free address in the ranges it may use), allowed
// unchanged when kube-apiserver would refuse it with its own text anyway
// (an address taken or in no range) or when the webhook cannot judge (not
// ready: kube-apiserver picks, and the repair and `allocator status` report
// where).
func (w *Webhook) refusal(err error, record *allocErrors, warnings []string) *admissionv1.AdmissionResponse {
	raw := record.last()
	switch {
	case errors.Is(raw, allocation.ErrNotReady):
		return allowed(append(warnings, "the allocator webhook is not ready: kube-apiserver picks this Service's ClusterIP by its own rules"))
	case errors.Is(raw, allocation.ErrAllocated), errors.Is(raw, allocation.ErrMismatchedNetwork), errors.Is(raw, allocation.ErrNotInRange):
		return allowed(warnings)
	case raw == nil:
		// Not the ClusterIPs' (the node ports' pass-through refuses nothing).
		return allowed(warnings)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return errored(err)
	}
	st := status.Status()
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &st, Warnings: warnings}
}

// familyPatch is the JSON patch that gives svc the ClusterIPs and family
// fields picked holds, nil when the webhook picked no address: what else
// servicealloc normalized or defaulted, kube-apiserver does itself.
func familyPatch(svc, picked *corev1.Service) ([]byte, error) {
	if len(pickedFor(svc, picked)) == 0 {
		return nil, nil
	}
	ops := []jsonPatchOp{
		{Op: "add", Path: "/spec/clusterIP", Value: picked.Spec.ClusterIP},
		{Op: "add", Path: "/spec/clusterIPs", Value: picked.Spec.ClusterIPs},
		{Op: "add", Path: "/spec/ipFamilies", Value: picked.Spec.IPFamilies},
	}
	if picked.Spec.IPFamilyPolicy != nil {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/ipFamilyPolicy", Value: *picked.Spec.IPFamilyPolicy})
	}
	return json.Marshal(ops)
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

func allowed(warnings []string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

// errored answers a request the webhook could not judge: a call failure,
// to which the webhook configuration's failurePolicy applies.
func errored(err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: err.Error()}}
}

// recorder collects the warnings servicealloc adds for the response.
type recorder struct {
	mu    sync.Mutex
	texts []string
}

func (r *recorder) AddWarning(_, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(r.texts, text) {
		r.texts = append(r.texts, text)
	}
}

// allocErrors records the errors the ClusterIP allocators returned during
// one admission, before servicealloc turned them into API statuses.
type allocErrors struct {
	mu   sync.Mutex
	errs []error
}

func (r *allocErrors) add(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *allocErrors) last() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return r.errs[len(r.errs)-1]
}

type allocErrorsKey struct{}

func withAllocErrors(ctx context.Context, r *allocErrors) context.Context {
	return context.WithValue(ctx, allocErrorsKey{}, r)
}

// recording is a family's allocator whose errors are recorded in the
// admission's allocErrors, and whose dynamic picks prefer this replica's
// stripe (members.go).
type recording struct {
	allocation.Interface
	family  *ipaddress.Allocator // nil: a dry-run view
	members *members
}

func (r recording) note(ctx context.Context, err error) error {
	if rec, ok := ctx.Value(allocErrorsKey{}).(*allocErrors); ok && err != nil {
		rec.add(err)
	}
	return err
}

func (r recording) Allocate(ctx context.Context, ip netip.Addr, owner allocation.Owner) error {
	return r.note(ctx, r.Interface.Allocate(ctx, ip, owner))
}

func (r recording) AllocateNext(ctx context.Context, owner allocation.Owner) (netip.Addr, error) {
	if k, n := r.members.stripe(); n > 1 && r.family != nil {
		ip, err := r.family.AllocateNextOutside(ctx, owner, otherStripes{k: k, n: n})
		if !errors.Is(err, ipaddress.ErrTooManyCollisions) {
			return ip, r.note(ctx, err)
		}
		// The stripe is full (or unlucky): anywhere.
	}
	ip, err := r.Interface.AllocateNext(ctx, owner)
	return ip, r.note(ctx, err)
}

func (r recording) DryRun() allocation.Interface { return recording{Interface: r.Interface.DryRun()} }

// passPorts is the node-port allocator of the webhook's servicealloc:
// kube-apiserver allocates node ports, so every port is accepted and none
// is kept.
type passPorts struct{ rng nodeport.Range }

func newPassPorts() passPorts {
	rng, _ := nodeport.New(1, nodeport.MaxPort) // every port: the range is kube-apiserver's to check
	return passPorts{rng: rng}
}

func (passPorts) Allocate(context.Context, int) error         { return nil }
func (p passPorts) AllocateNext(context.Context) (int, error) { return p.rng.Last(), nil }
func (passPorts) Release(context.Context, int) error          { return nil }
func (passPorts) Has(context.Context, int) (bool, error)      { return false, nil }
func (p passPorts) Range() nodeport.Range                     { return p.rng }
func (p passPorts) DryRun() nodeport.Interface                { return p }
