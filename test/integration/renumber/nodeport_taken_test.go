package renumber_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/allocator/allocator/internal/renumber"
	"github.com/allocator/allocator/internal/testserver"
)

// thiefTransport creates the thief Service, through its own client, right
// after the DELETE of the victim Service succeeds and before renumber's
// client sees the answer: the victim's node port is free for that moment
// only, as when another client's create lands while renumber re-creates.
type thiefTransport struct {
	next   http.RoundTripper
	victim string // the URL path of the victim's DELETE
	steal  func() error

	once sync.Once
	err  error
}

func (tt *thiefTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tt.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodDelete && req.URL.Path == tt.victim && resp.StatusCode == http.StatusOK {
		tt.once.Do(func() { tt.err = tt.steal() })
	}
	return resp, err
}

// renumberWhileThiefTakes renumbers "old", whose only Service is
// default/victim, through a client that creates thief right after the
// victim's delete, and returns the victim's move.
func renumberWhileThiefTakes(ctx context.Context, t *testing.T, s *testserver.Server, thief *corev1.Service) renumber.Move {
	t.Helper()
	c := s.Client
	cfg := rest.CopyConfig(s.RESTConfig)
	tt := &thiefTransport{victim: "/api/v1/namespaces/default/services/victim", steal: func() error {
		_, err := c.CoreV1().Services(thief.Namespace).Create(ctx, thief, metav1.CreateOptions{})
		return err
	}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { tt.next = rt; return tt })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	journal, err := renumber.OpenJournal(filepath.Join(t.TempDir(), "renumber.journal"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := renumber.Run(ctx, renumber.Config{Client: client, From: "old", Journal: journal, JournalPath: journal.Path()})
	if err != nil {
		t.Fatalf("renumber: %v", err)
	}
	if _, err := journal.Close(); err != nil {
		t.Fatal(err)
	}
	if tt.err != nil {
		t.Fatalf("the thief's create between the delete and the re-create: %v", tt.err)
	}
	if len(res.Moves) != 1 {
		t.Fatalf("moves %+v, want the victim's only", res.Moves)
	}
	return res.Moves[0]
}

// TestRenumberReportsTakenNodePort: a NodePort Service in the draining
// ServiceCIDR "old" is moved; between its delete and its create another
// Service takes its node port. The move re-creates it with another node
// port and reports the change (outcome Changed, naming the port), never
// silently; the other Service keeps the port it took.
func TestRenumberReportsTakenNodePort(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := startWithOld(ctx, t, "10.96.0.0/24")
	c := s.Client
	victim := service(metav1.NamespaceDefault, "victim", corev1.ServiceTypeNodePort, []string{"10.1.0.20"})
	victim.Spec.Ports[0].NodePort = 30080
	if _, err := c.CoreV1().Services(victim.Namespace).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	drain(ctx, t, c, "old", "10.1.0.201")

	thief := service(metav1.NamespaceDefault, "thief", corev1.ServiceTypeNodePort, nil)
	thief.Spec.Ports[0].NodePort = 30080
	m := renumberWhileThiefTakes(ctx, t, s, thief)
	if m.Outcome != renumber.Changed || !strings.Contains(m.Reason, "node port 30080 of port 80/TCP is now ") {
		t.Errorf("the victim's move: %s (%s), want %q naming node port 30080", m.Outcome, m.Reason, renumber.Changed)
	}
	got, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "victim", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the victim after the move: %v", err)
	}
	if p := got.Spec.Ports[0].NodePort; p == 30080 || p == 0 {
		t.Errorf("the victim's node port is %d, want another one than the thief's 30080", p)
	}
	if strings.HasPrefix(got.Spec.ClusterIP, "10.1.0.") {
		t.Errorf("the victim still holds %s inside old", got.Spec.ClusterIP)
	}
	stolen, err := c.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "thief", metav1.GetOptions{})
	if err != nil || stolen.Spec.Ports[0].NodePort != 30080 {
		t.Errorf("the thief: %v, node port %v, want 30080", err, stolen.Spec.Ports)
	}
}
