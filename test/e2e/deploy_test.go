package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// TestDeployApplyStartsNothingOnce reads deploy/ as `kubectl apply -f
// deploy/` does (its files, not its subdirectories) and checks it holds only
// what a user means to apply and keep: no Pod (the static pod belongs in the
// kubelet's manifest directory, deploy/static-pod/), no Job (a one-off run,
// deploy/jobs/, applied on purpose), and every document an object.
// hack/deploy-check.sh sends the same directory to a real kube-apiserver.
func TestDeployApplyStartsNothingOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "..", "deploy")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	objects := 0
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			if tm.Kind == "" {
				if strings.TrimSpace(stripComments(string(doc))) != "" {
					t.Errorf("%s: a document without a kind", e.Name())
				}
				continue
			}
			objects++
			switch tm.Kind {
			case "Pod":
				t.Errorf("%s: `kubectl apply -f deploy/` would create a bare Pod; a static pod goes in deploy/static-pod/", e.Name())
			case "Job":
				t.Errorf("%s: `kubectl apply -f deploy/` would start a one-off Job; it goes in deploy/jobs/", e.Name())
			}
		}
	}
	if objects == 0 {
		t.Fatal("deploy/ holds no object")
	}
	for _, f := range []string{"static-pod/allocator-serve.yaml", "jobs/repair-job.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("deploy/%s: %v", f, err)
		}
	}
}

func stripComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteString("\n")
		}
	}
	return b.String()
}
