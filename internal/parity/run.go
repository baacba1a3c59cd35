package parity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/pkg/model"
)

// namespace is where every Service of the corpus lives: it exists on every
// server without a namespace controller.
const namespace = metav1.NamespaceDefault

// Target is the server the corpus is sent to.
type Target struct {
	core, networking rest.Interface
}

// NewTarget builds a Target from a client configuration. Warnings are kept
// in the results, not logged.
func NewTarget(cfg *rest.Config) (*Target, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = rest.NoWarnings{}
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	cfg.QPS, cfg.Burst = 1e6, 1e6 // the corpus is sequential: no client-side throttling
	cfg.RateLimiter = nil
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("parity client: %w", err)
	}
	return &Target{core: cs.CoreV1().RESTClient(), networking: cs.NetworkingV1().RESTClient()}, nil
}

// Run sends every case that runs in m to the target and returns the
// answers. progress, when not nil, is called after each case with how long
// it took (its clean-up included).
func Run(ctx context.Context, t *Target, cases []Case, m model.Name, progress func(c Case, took time.Duration)) ([]CaseRecord, error) {
	var out []CaseRecord
	for _, c := range cases {
		if !c.runsIn(m) {
			continue
		}
		start := time.Now()
		rec, err := t.runCase(ctx, c)
		if err != nil {
			return out, fmt.Errorf("case %s: %w", c.Name, err)
		}
		out = append(out, rec)
		if progress != nil {
			progress(c, time.Since(start))
		}
	}
	return out, nil
}

func (t *Target) runCase(ctx context.Context, c Case) (CaseRecord, error) {
	n := newNormalizer(c)
	rec := CaseRecord{Name: c.Name}
	for _, s := range c.Steps {
		r, err := t.send(ctx, s)
		if err != nil {
			return rec, fmt.Errorf("%s: %w", s.Request(), err)
		}
		rec.Results = append(rec.Results, n.result(s, r))
	}
	if err := t.cleanup(ctx, c); err != nil {
		return rec, err
	}
	return rec, nil
}

// answer is one raw answer.
type answer struct {
	code     int
	body     []byte
	err      error
	warnings []string
}

func (t *Target) client(k Kind) rest.Interface {
	if k == KindServiceCIDR {
		return t.networking
	}
	return t.core
}

func (t *Target) request(verb string, k Kind, name string) *rest.Request {
	r := t.client(k).Verb(verb).Resource(string(k))
	if k == KindService {
		r = r.Namespace(namespace)
	}
	if name != "" {
		r = r.Name(name)
	}
	return r.Timeout(30 * time.Second)
}

func (t *Target) do(ctx context.Context, r *rest.Request) answer {
	res := r.Do(ctx)
	var a answer
	res.StatusCode(&a.code)
	a.body, a.err = res.Raw()
	for _, w := range res.Warnings() {
		a.warnings = append(a.warnings, w.Text)
	}
	return a
}

// send performs one step. An error is returned only when the step could not
// be sent (the server's refusals are answers).
func (t *Target) send(ctx context.Context, s Step) (answer, error) {
	dry := func(r *rest.Request) *rest.Request {
		if s.DryRun {
			return r.Param("dryRun", metav1.DryRunAll)
		}
		return r
	}
	switch s.Op {
	case OpCreate:
		body, err := json.Marshal(s.body())
		if err != nil {
			return answer{}, err
		}
		return t.do(ctx, dry(t.request(http.MethodPost, s.Kind, "").Body(body))), nil
	case OpUpdate, OpUpdateStatus:
		cur := t.do(ctx, t.request(http.MethodGet, s.Kind, s.Name))
		if cur.err != nil {
			return cur, nil // nothing to update: the GET's refusal is the answer
		}
		body, err := mutate(s, cur.body)
		if err != nil {
			return answer{}, err
		}
		r := t.request(http.MethodPut, s.Kind, s.Name)
		if s.Op == OpUpdateStatus {
			r = r.SubResource("status")
		}
		return t.do(ctx, dry(r.Body(body))), nil
	case OpPatch, OpPatchStatus:
		r := t.client(s.Kind).Patch(s.PatchType).Resource(string(s.Kind)).Name(s.Name).Timeout(30 * time.Second)
		if s.Kind == KindService {
			r = r.Namespace(namespace)
		}
		if s.Op == OpPatchStatus {
			r = r.SubResource("status")
		}
		return t.do(ctx, dry(r.Body([]byte(s.Patch)))), nil
	case OpDelete:
		return t.do(ctx, dry(t.request(http.MethodDelete, s.Kind, s.Name))), nil
	case OpGet:
		return t.do(ctx, t.request(http.MethodGet, s.Kind, s.Name)), nil
	case OpWaitReady:
		return t.waitReady(ctx, s.Name)
	}
	return answer{}, fmt.Errorf("unknown op %q", s.Op)
}

// waitReady polls ServiceCIDR name until its Ready condition is True, for
// up to 30 s, and answers with the condition alone. A second more lets the
// server's allocator, which learns of ranges from a watch, catch up.
func (t *Target) waitReady(ctx context.Context, name string) (answer, error) {
	var ready answer
	err := poll(ctx, 30*time.Second, func() (bool, error) {
		a := t.do(ctx, t.request(http.MethodGet, KindServiceCIDR, name))
		if a.err != nil {
			return false, nil
		}
		var obj networkingv1.ServiceCIDR
		if err := json.Unmarshal(a.body, &obj); err != nil {
			return false, fmt.Errorf("decode ServiceCIDR %s: %w", name, err)
		}
		for _, c := range obj.Status.Conditions {
			if c.Type == networkingv1.ServiceCIDRConditionReady && c.Status == metav1.ConditionTrue {
				body, err := json.Marshal(map[string]any{"kind": "ServiceCIDR", "status": map[string]any{"ready": c.Status, "reason": c.Reason}})
				ready = answer{code: a.code, body: body}
				return true, err
			}
		}
		return false, nil
	})
	if err != nil {
		return answer{}, fmt.Errorf("ServiceCIDR %s not ready: %w", name, err)
	}
	time.Sleep(time.Second)
	return ready, nil
}

// poll calls done every 100 ms until it reports true or an error, ctx ends,
// or timeout passes.
func poll(ctx context.Context, timeout time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := done()
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// mutate applies the step's change to the current object and returns the
// body of the PUT.
func mutate(s Step, current []byte) ([]byte, error) {
	if s.Kind == KindServiceCIDR {
		return mutateAs(current, s.MutateCIDR)
	}
	return mutateAs(current, s.Mutate)
}

func mutateAs[T any](current []byte, change func(*T)) ([]byte, error) {
	var obj T
	if err := json.Unmarshal(current, &obj); err != nil {
		return nil, fmt.Errorf("decode the current %T: %w", obj, err)
	}
	if change != nil {
		change(&obj)
	}
	return json.Marshal(&obj)
}

// cleanup deletes what the case created, Services first so the addresses
// of a ServiceCIDR are free when it goes. Services are waited for; a
// ServiceCIDR is not: its controller keeps a deleted one for a grace
// period, so the corpus never reuses a ServiceCIDR name.
func (t *Target) cleanup(ctx context.Context, c Case) error {
	seen := map[string]bool{}
	for _, kind := range []Kind{KindService, KindServiceCIDR} {
		for _, s := range c.Steps {
			key := string(kind) + "/" + s.Name
			if s.Kind != kind || seen[key] || s.Name == "kubernetes" {
				continue
			}
			seen[key] = true
			if err := t.remove(ctx, kind, s.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *Target) remove(ctx context.Context, k Kind, name string) error {
	if k == KindServiceCIDR {
		if err := t.request(http.MethodDelete, k, name).Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("clean up %s/%s: %w", k, name, err)
		}
		return nil
	}
	// A finalizer the case set would hold the Service forever.
	_ = t.client(k).Patch(types.MergePatchType).Resource(string(k)).Namespace(namespace).Name(name).
		Body([]byte(`{"metadata":{"finalizers":null}}`)).Do(ctx).Error() // not found is fine
	if err := t.request(http.MethodDelete, k, name).Do(ctx).Error(); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("clean up %s/%s: %w", k, name, err)
	}
	err := poll(ctx, 60*time.Second, func() (bool, error) {
		return apierrors.IsNotFound(t.request(http.MethodGet, k, name).Do(ctx).Error()), nil
	})
	if err != nil {
		return fmt.Errorf("clean up %s/%s: still there: %w", k, name, err)
	}
	return nil
}

// statusOf extracts the Status of a refused request: the body the server
// sent, or what the client made of it when the body is not a Status.
func statusOf(body []byte, err error) (metav1.Status, bool) {
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		return st, true
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status(), true
	}
	return metav1.Status{}, false
}
