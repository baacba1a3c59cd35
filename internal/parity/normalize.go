package parity

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/allocator/allocator/internal/ipallocator"
)

// normalizer turns one case's answers into comparable results: values the
// corpus did not write are replaced by per-case symbols.
type normalizer struct {
	literalIPs   map[netip.Addr]bool
	literalPorts map[int64]bool
	ips          map[netip.Addr]string
	ports        map[int64]string
}

// ipFields and portFields are the keys whose values a server may pick.
var (
	ipFields   = map[string]bool{"clusterIP": true, "clusterIPs": true}
	portFields = map[string]bool{"nodePort": true, "healthCheckNodePort": true}
)

func newNormalizer(c Case) *normalizer {
	n := &normalizer{
		literalIPs:   map[netip.Addr]bool{},
		literalPorts: map[int64]bool{},
		ips:          map[netip.Addr]string{},
		ports:        map[int64]string{},
	}
	created := map[string]*corev1.Service{}
	for _, s := range c.Steps {
		switch {
		case s.Op == OpCreate:
			n.collect(jsonValue(s.body()))
			if s.Service != nil {
				created[s.Name] = s.Service
			}
		case s.Op == OpPatch || s.Op == OpPatchStatus:
			var v any
			if json.Unmarshal([]byte(s.Patch), &v) == nil {
				n.collect(v)
			}
		case s.Mutate != nil:
			n.collect(jsonValue(probe(s.Mutate, created[s.Name])))
		}
	}
	return n
}

// probe applies a mutation to a copy of the Service the case created under
// that name, to learn the values it writes.
func probe(mutate func(*corev1.Service), base *corev1.Service) (out *corev1.Service) {
	if base == nil {
		base = &corev1.Service{}
	}
	out = base.DeepCopy()
	defer func() {
		if recover() != nil { // a mutation indexing what only the server filled in
			out = nil
		}
	}()
	mutate(out)
	return out
}

func jsonValue(obj any) any {
	data, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("parity: corpus object does not encode: %v", err))
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		panic(fmt.Sprintf("parity: corpus object does not decode: %v", err))
	}
	return v
}

// collect records every address and node port written in v.
func (n *normalizer) collect(v any) {
	walk(v, "", func(key string, val any) any {
		switch x := val.(type) {
		case string:
			if a, err := netip.ParseAddr(x); err == nil {
				n.literalIPs[a] = true
			}
		case float64:
			if portFields[key] {
				n.literalPorts[int64(x)] = true
			}
		}
		return val
	})
}

// walk calls fn for every scalar in v, in a stable order (keys sorted),
// with the key it is under (the enclosing key for list elements) and stores
// what fn returns. The order numbers the symbols, so it must not vary.
func walk(v any, key string, fn func(key string, val any) any) any {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			x[k] = walk(x[k], k, fn)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = walk(e, key, fn)
		}
		return x
	default:
		return fn(key, v)
	}
}

func (n *normalizer) ipSymbol(a netip.Addr) string {
	if s, ok := n.ips[a]; ok {
		return s
	}
	s := fmt.Sprintf("<ip%d>", len(n.ips)+1)
	n.ips[a] = s
	return s
}

func (n *normalizer) portSymbol(p int64) string {
	if s, ok := n.ports[p]; ok {
		return s
	}
	s := fmt.Sprintf("<port%d>", len(n.ports)+1)
	n.ports[p] = s
	return s
}

// object keeps the comparable parts of an answered object and replaces the
// values the server picked.
func (n *normalizer) object(k Kind, body []byte) map[string]any {
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return map[string]any{"undecodable": string(body)}
	}
	out := map[string]any{"kind": obj["kind"]}
	if md, ok := obj["metadata"].(map[string]any); ok {
		fields := []string{"name", "namespace", "labels", "annotations", "finalizers"}
		if k == KindServiceCIDR {
			// kube-controller-manager adds a ServiceCIDR's finalizer some
			// time after the create is answered; we add it in the create,
			// so no CIDR is ever unprotected. When is not the contract.
			fields = fields[:4]
		}
		kept := map[string]any{}
		for _, f := range fields {
			if v, ok := md[f]; ok {
				kept[f] = v
			}
		}
		if annotations, ok := kept["annotations"].(map[string]any); ok && k == KindServiceCIDR {
			// Our server names its allocator model on the default
			// ServiceCIDR for the jobs that reach it without etcd: an
			// annotation kube-apiserver lacks, not an answer that differs.
			delete(annotations, ipallocator.AnnotationModel)
			if len(annotations) == 0 {
				delete(kept, "annotations")
			}
		}
		out["metadata"] = kept
	}
	if v, ok := obj["spec"]; ok {
		out["spec"] = v
	}
	// A ServiceCIDR's status is written by a controller after the answer:
	// when it lands is not part of the contract.
	if v, ok := obj["status"]; ok && k == KindService {
		out["status"] = v
	}
	if items, ok := obj["items"]; ok {
		out["items"] = len(items.([]any))
	}
	walk(out, "", func(key string, val any) any {
		switch x := val.(type) {
		case string:
			if !ipFields[key] {
				return val
			}
			if a, err := netip.ParseAddr(x); err == nil && !n.literalIPs[a] {
				return n.ipSymbol(a)
			}
		case float64:
			if portFields[key] && x != 0 && !n.literalPorts[int64(x)] {
				return n.portSymbol(int64(x))
			}
		}
		return val
	})
	return out
}

var (
	ipToken   = regexp.MustCompile(`[0-9A-Fa-f]*[.:][0-9A-Fa-f.:]*[0-9A-Fa-f]`)
	portToken = regexp.MustCompile(`\b[0-9]{4,5}\b`)
)

// text replaces the picked values in a message by their symbols.
func (n *normalizer) text(s string) string {
	s = ipToken.ReplaceAllStringFunc(s, func(tok string) string {
		if a, err := netip.ParseAddr(tok); err == nil {
			if sym, ok := n.ips[a]; ok {
				return sym
			}
		}
		return tok
	})
	return portToken.ReplaceAllStringFunc(s, func(tok string) string {
		p, _ := strconv.ParseInt(tok, 10, 64)
		if sym, ok := n.ports[p]; ok {
			return sym
		}
		return tok
	})
}

func (n *normalizer) result(s Step, a answer) Result {
	r := Result{Request: s.Request(), Code: a.code, Deliberate: s.Deliberate}
	if a.err == nil && s.Op == OpWaitReady {
		_ = json.Unmarshal(a.body, &r.Object) // built by waitReady: nothing to drop
	} else if a.err == nil {
		r.Object = n.object(s.Kind, a.body)
	} else if st, ok := statusOf(a.body, a.err); ok {
		r.Reason = string(st.Reason)
		r.Message = n.text(st.Message)
		if st.Details != nil {
			for _, c := range st.Details.Causes {
				r.Causes = append(r.Causes, Cause{Type: string(c.Type), Field: c.Field, Message: n.text(c.Message)})
			}
		}
	} else {
		r.Message = n.text(a.err.Error())
	}
	for _, w := range a.warnings {
		r.Warnings = append(r.Warnings, n.text(w))
	}
	sort.Strings(r.Warnings)
	return r
}

func mustCompactJSON(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("parity: corpus object does not encode: %v", err))
	}
	return string(data)
}
