package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/allocator/allocator/internal/testserver"
)

// kubectlPlugin links the allocator binary as kubectl-allocator in a
// directory of its own and returns a runner of the real kubectl with that
// directory first on PATH and a HOME of its own (no user kubeconfig).
func kubectlPlugin(t *testing.T, bin string) func(args ...string) (stdout, stderr string, code int) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "kubectl-allocator")); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	return func(args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		code := 0
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return stdout.String(), stderr.String(), code
	}
}

// TestKubectlPlugin runs `kubectl allocator ...` through the real kubectl:
// kubectl finds the binary as kubectl-allocator on PATH, and the plugin
// reads kubectl's --kubeconfig, --context and -n.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	kubectl := kubectlPlugin(t, bin)
	srv := testserver.Start(t, testserver.Options{ServiceRange: "10.0.0.0/24", Model: "ipaddress"})
	ctx := context.Background()
	if _, err := srv.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, ip := range []string{"10.0.0.3", "10.0.0.100", ""} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-" + string(rune('a'+i)), Namespace: "team-a"},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}}}
		if _, err := srv.Client.CoreV1().Services("team-a").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// A kubeconfig whose current context points at nothing: only
	// --context selects the server, so a plugin that ignored it fails.
	cfg, err := clientcmd.LoadFromFile(srv.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	good := cfg.CurrentContext
	cfg.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: cfg.Contexts[good].AuthInfo}
	cfg.Contexts["plugin-test"] = cfg.Contexts[good]
	delete(cfg.Contexts, good)
	cfg.CurrentContext = "nowhere"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	if out, errOut, code := kubectl("plugin", "list"); code != 0 || !strings.Contains(out, "kubectl-allocator") {
		t.Errorf("kubectl plugin list: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code := kubectl("allocator", "status", "--kubeconfig", kubeconfig, "--context", "plugin-test", "-o", "json")
	if code != 0 {
		t.Fatalf("kubectl allocator status: exit %d\n%s%s", code, out, errOut)
	}
	var got struct {
		Model string
		CIDRs []struct {
			CIDR            string
			Used            uint64
			Static, Dynamic struct{ Used uint64 }
			Namespaces      []struct {
				Namespace string
				Used      uint64
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	// kubernetes (.1) and team-a's .3 are static; .100 and the dynamic one
	// are in the upper band.
	if len(got.CIDRs) != 1 || got.Model != "ipaddress" || got.CIDRs[0].Used != 4 || got.CIDRs[0].Static.Used != 2 || got.CIDRs[0].Dynamic.Used != 2 ||
		len(got.CIDRs[0].Namespaces) != 2 || got.CIDRs[0].Namespaces[0].Namespace != "team-a" || got.CIDRs[0].Namespaces[0].Used != 3 {
		t.Errorf("kubectl allocator status -o json: %+v", got)
	}

	// Without --context the current context (nowhere) is used and fails.
	if out, errOut, code := kubectl("allocator", "status", "--kubeconfig", kubeconfig); code == 0 {
		t.Errorf("status on the unreachable current context succeeded:\n%s%s", out, errOut)
	}
	// -n shows that namespace's share; the totals stay the cluster's.
	out, errOut, code = kubectl("allocator", "status", "--kubeconfig", kubeconfig, "--context", "plugin-test", "-n", "default")
	if code != 0 || !strings.Contains(out, "IPv4    10.0.0.0/24  all      254   4     250   1.6%   default=1\n") {
		t.Errorf("kubectl allocator status -n default: exit %d\n%s%s", code, out, errOut)
	}
	// repair works on the whole cluster: -n is refused, not ignored.
	if out, errOut, code := kubectl("allocator", "repair", "--kubeconfig", kubeconfig, "--context", "plugin-test", "-n", "team-a", "--dry-run"); code != 1 || !strings.Contains(errOut, "-n/--namespace team-a: this command works on the whole cluster") {
		t.Errorf("kubectl allocator repair -n: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := kubectl("allocator", "repair", "--kubeconfig", kubeconfig, "--context", "plugin-test", "--dry-run", "-o", "json"); code != 0 || !strings.Contains(out, `"model": "ipaddress"`) {
		t.Errorf("kubectl allocator repair: exit %d\n%s%s", code, out, errOut)
	}
	// The server's commands are not part of the plugin; help names it as
	// kubectl does.
	if _, errOut, code := kubectl("allocator", "serve"); code == 0 || !strings.Contains(errOut, `unknown command "serve" for "kubectl allocator"`) {
		t.Errorf("kubectl allocator serve: exit %d\n%s", code, errOut)
	}
	if out, _, code := kubectl("allocator", "status", "--help"); code != 0 || !strings.Contains(out, "kubectl allocator status [flags]") || !strings.Contains(out, "--context string") {
		t.Errorf("kubectl allocator status --help: exit %d\n%s", code, out)
	}
}
