package parity

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

// TestCorpus pins what the issue asks of the corpus: at least 500 requests,
// every family configuration, unique case names, and the twelve items.
func TestCorpus(t *testing.T) {
	t.Parallel()
	for _, f := range Families {
		cs := Corpus(f)
		if n := Requests(cs); n < 500 {
			t.Errorf("%s: %d requests, want at least 500", f.Name, n)
		}
		names := map[string]bool{}
		for _, c := range cs {
			if names[c.Name] {
				t.Errorf("%s: case %s twice", f.Name, c.Name)
			}
			names[c.Name] = true
			if len(c.Steps) == 0 {
				t.Errorf("%s: case %s sends nothing", f.Name, c.Name)
			}
		}
		for i := 1; i <= 12; i++ {
			found := false
			for name := range names {
				found = found || strings.HasPrefix(name, fmt.Sprintf("item%02d/", i))
			}
			if !found {
				t.Errorf("%s: no case for item %02d", f.Name, i)
			}
		}
	}
}

// TestNormalizer checks picked values become symbols, in objects and in
// messages, while written values stay.
func TestNormalizer(t *testing.T) {
	t.Parallel()
	c := Case{Name: "n", Steps: steps(create(svc("a", ips("10.0.0.5"), typ(corev1.ServiceTypeNodePort), ports(tcpPort("p", 80, 30001), tcpPort("q", 81, 0)))))}
	n := newNormalizer(c)
	body := []byte(`{"kind":"Service","metadata":{"name":"a","uid":"u","resourceVersion":"9"},
		"spec":{"clusterIP":"10.0.0.5","clusterIPs":["10.0.0.5","fd00:10::8:1"],
		"ports":[{"name":"p","nodePort":30001},{"name":"q","nodePort":31234}]}}`)
	got := n.object(KindService, body)
	want := map[string]any{
		"kind":     "Service",
		"metadata": map[string]any{"name": "a"},
		"spec": map[string]any{
			"clusterIP":  "10.0.0.5",
			"clusterIPs": []any{"10.0.0.5", "<ip1>"},
			"ports":      []any{map[string]any{"name": "p", "nodePort": float64(30001)}, map[string]any{"name": "q", "nodePort": "<port1>"}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("object (-want +got):\n%s", d)
	}
	if got, want := n.text("port 31234 and fd00:10::8:1, not 30001 or 10.0.0.5 or 131234"), "port <port1> and <ip1>, not 30001 or 10.0.0.5 or 131234"; got != want {
		t.Errorf("text: got %q, want %q", got, want)
	}
}

// TestCompare checks a difference is reported, a stale record is told
// apart, and a deliberate step compares our code and reason only.
func TestCompare(t *testing.T) {
	t.Parallel()
	rec := []CaseRecord{{Name: "a", Results: []Result{{Request: "create x", Code: 201}, {Request: "get x", Code: 200, Deliberate: &Deliberate{Code: 422, Reason: "Invalid"}}}}}
	same := []CaseRecord{{Name: "a", Results: []Result{{Request: "create x", Code: 201}, {Request: "get x", Code: 422, Reason: "Invalid", Message: "ours"}}}}
	if d := Compare(rec, same); len(d) != 0 {
		t.Errorf("equal answers differ: %+v", d)
	}
	differ := []CaseRecord{{Name: "a", Results: []Result{{Request: "create x", Code: 422}, {Request: "get x", Code: 422, Reason: "Invalid"}}}}
	if d := Compare(rec, differ); len(d) != 1 || d[0].Stale {
		t.Errorf("a different code: %+v", d)
	}
	stale := []CaseRecord{{Name: "a", Results: []Result{{Request: "create y", Code: 201}, {Request: "get x", Code: 422, Reason: "Invalid"}}}}
	if d := Compare(rec, stale); len(d) != 1 || !d[0].Stale {
		t.Errorf("another request: %+v", d)
	}
	if d := Compare(rec, []CaseRecord{{Name: "b"}}); len(d) != 1 || !d[0].Stale {
		t.Errorf("a case not recorded: %+v", d)
	}
}
