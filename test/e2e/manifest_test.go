package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/allocator/allocator/internal/version"
)

const (
	deployDir  = "../../deploy"
	dockerfile = "../../Dockerfile"
	// imageRepository is where the manifests pull the image from.
	imageRepository = "ghcr.io/allocator/allocator"
)

// TestManifestImages: every container of deploy/ (the one-off Jobs and the
// static pod too) runs the image of this release, tagged with the version
// in internal/version/VERSION as hack/image.sh tags it, with
// imagePullPolicy IfNotPresent. ":latest" without a policy means Always: a
// node pulls on every start and never uses an image built and loaded on it.
func TestManifestImages(t *testing.T) {
	t.Parallel()
	img := readImageConfig(t, dockerfile)
	want := imageRepository + ":" + version.Release()
	images := map[string][]string{}
	for _, file := range workloadManifests(t) {
		p := readManifestPod(t, deployDir, file, img)
		image := p.container.Image
		images[image] = append(images[image], file)
		if image != want {
			t.Errorf("%s: image %q: want %s (the release, internal/version/VERSION)", file, image, want)
		}
		if p.container.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: imagePullPolicy %q: want IfNotPresent (unset with a :latest tag means Always)", file, p.container.ImagePullPolicy)
		}
	}
	if len(images) > 1 {
		t.Errorf("the manifests name different images: %v", images)
	}
}

// TestManifestsStartOnANode starts the real binary the way each workload
// manifest of deploy/ starts it on a kubeadm control-plane node: the
// manifest's arguments (ports, etcd endpoint and bind address changed to
// the test's, on loopback), the uid, gid and groups the kubelet and the
// container runtime give the container, its capabilities, and a root
// filesystem holding what its volumes mount, with the owners and modes
// kubeadm and the kubelet give those files (manifest_node_test.go). The
// control plane is a TLS etcd requiring client certificates and our own
// server standing in for kube-apiserver (manifest_cluster_test.go).
//
// A static pod must become ready (its readinessProbe) and stay up; a Job's
// or CronJob's pod must complete (exit 0). Neither may log a permission
// error. The processes run as the manifests say, so the test needs root
// (and Linux); otherwise it skips. The webhook's Deployment
// (deploy/webhook) is not started here: the stand-in API server serves no
// Secrets or webhook configurations, which its self-signed certificate
// needs; TestWebhookInstallOnKubeAPIServer runs it against kube-apiserver.
func TestManifestsStartOnANode(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("imitates a Linux node: chroot, credentials and capabilities of Linux")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it runs each container's process as the manifest's uid and gid, in a chroot, over root-owned files, as the kubelet does")
	}
	img := readImageConfig(t, dockerfile)
	var pods []*manifestPod
	for _, file := range workloadManifests(t) {
		if p := readManifestPod(t, deployDir, file, img); p.kind != "Deployment" {
			pods = append(pods, p)
		}
	}
	bin := buildImageBinary(t)
	users := []string{"system:allocator"}
	for _, p := range pods {
		if p.kind != "Pod" {
			users = append(users, serviceAccountUser(p.spec.ServiceAccountName))
		}
	}
	cluster := startTestCluster(t, bin, clusterServeArgs(pods), users)
	node := newControlPlaneNode(t, cluster, deployDir)
	for _, p := range pods {
		t.Run(p.file, func(t *testing.T) {
			t.Parallel()
			started := time.Now()
			root := node.containerRoot(t, p, bin)
			argv, ports := adaptArgs(t, p, cluster)
			c := startContainer(t, root, p, argv, containerEnv(t, p, cluster))
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("%s's output (last lines):\n%s", p.file, tail(c.log.String(), 40))
				}
			})
			if p.kind == "Pod" {
				expectServing(t, p, c, ports)
			} else {
				expectCompletes(t, p, c)
			}
			if line := permissionError(c.log.String()); line != "" {
				t.Errorf("%s as %s: a permission error: %s", p.file, p.identity, line)
			}
			if !t.Failed() {
				t.Logf("%s as %s: %s in %s; output's last line: %s", p.file, p.identity, map[bool]string{true: "ready", false: "completed"}[p.kind == "Pod"],
					time.Since(started).Round(100*time.Millisecond), tail(c.log.String(), 1))
			}
		})
	}
}

// expectServing waits until the pod's readinessProbe succeeds, then checks
// its livenessProbe, its capabilities and that it is still running.
func expectServing(t *testing.T, p *manifestPod, c *containerProcess, ports map[int]int) {
	t.Helper()
	ready := p.container.ReadinessProbe
	if ready == nil || ready.HTTPGet == nil {
		t.Fatalf("%s: a static pod without an httpGet readinessProbe", p.file)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if c.exited(0) {
			return false, fmt.Errorf("exited with code %d: %s", c.exitCode(), tail(c.log.String(), 1))
		}
		return probe(ctx, ready.HTTPGet, ports) == nil, nil
	})
	if err != nil {
		t.Fatalf("%s as %s: not ready (readinessProbe %s): %v", p.file, p.identity, ready.HTTPGet.Path, err)
	}
	if live := p.container.LivenessProbe; live != nil && live.HTTPGet != nil {
		if err := probe(context.Background(), live.HTTPGet, ports); err != nil {
			t.Errorf("%s: livenessProbe: %v", p.file, err)
		}
	}
	caps, err := containerCaps(p.container.SecurityContext)
	if err != nil {
		t.Fatal(err)
	}
	want := capMask(caps)
	if p.identity.uid != 0 {
		want = 0 // a non-root process keeps no capability across exec
	}
	if got, err := c.effectiveCaps(); err != nil || got != want {
		t.Errorf("%s: effective capabilities %#x (%v), want %#x", p.file, got, err, want)
	}
	if c.exited(2 * time.Second) {
		t.Errorf("%s: exited with code %d after becoming ready", p.file, c.exitCode())
	}
}

// expectCompletes waits for the Job's pod to end and wants exit code 0.
func expectCompletes(t *testing.T, p *manifestPod, c *containerProcess) {
	t.Helper()
	if !c.exited(2 * time.Minute) {
		t.Fatalf("%s as %s: still running after 2 minutes", p.file, p.identity)
	}
	if code := c.exitCode(); code != 0 {
		t.Errorf("%s as %s: exit code %d: %s", p.file, p.identity, code, tail(c.log.String(), 1))
	}
}

// probe is the kubelet's httpGet probe: no client certificate, the
// server's certificate not verified, success on 2xx and 3xx.
func probe(ctx context.Context, get *corev1.HTTPGetAction, ports map[int]int) error {
	port, ok := ports[get.Port.IntValue()]
	if get.Port.Type != intstr.Int || !ok {
		return fmt.Errorf("probe port %s is none of the container's ports %v", get.Port.String(), ports)
	}
	u := url.URL{Scheme: strings.ToLower(string(get.Scheme)), Host: net.JoinHostPort(get.Host, strconv.Itoa(port)), Path: get.Path}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("%s: %s: %s", u.String(), resp.Status, body)
	}
	return nil
}

// adaptArgs is the container's command line with what cannot be the same
// here changed: --etcd-servers points at the test's etcd (same scheme),
// --secure-port at a free port (returned in ports, manifest's port → the
// test's, for the probes), and --bind-address 0.0.0.0 becomes 127.0.0.1
// (tests bind loopback only). Paths, certificates and every other flag are
// the manifest's.
func adaptArgs(t *testing.T, p *manifestPod, c *testCluster) (argv []string, ports map[int]int) {
	t.Helper()
	etcd, err := url.Parse(c.etcd.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	ports = map[int]int{}
	argv = replaceFlag(p.argv, "--etcd-servers", func(v string) string {
		var out []string
		for _, s := range strings.Split(v, ",") {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatalf("%s: --etcd-servers %s: %v", p.file, s, err)
			}
			u.Host = etcd.Host
			out = append(out, u.String())
		}
		return strings.Join(out, ",")
	})
	argv = replaceFlag(argv, "--secure-port", func(v string) string {
		port, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: --secure-port %s: %v", p.file, v, err)
		}
		ports[port] = freePort(t)
		return strconv.Itoa(ports[port])
	})
	argv = replaceFlag(argv, "--bind-address", func(v string) string {
		if v == "0.0.0.0" || v == "::" {
			return "127.0.0.1"
		}
		return v
	})
	return argv, ports
}

// containerEnv is the environment the runtime and the kubelet give the
// container: the image's PATH, HOME from the image's /etc/passwd, the
// kubernetes Service's address (pointing at the test's API server), and
// the manifest's literal env.
func containerEnv(t *testing.T, p *manifestPod, c *testCluster) []string {
	t.Helper()
	_, home := imageUser(p.identity.uid)
	api, err := url.Parse(c.url)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"KUBERNETES_SERVICE_HOST=" + api.Hostname(),
		"KUBERNETES_SERVICE_PORT=" + api.Port(),
	}
	for _, e := range p.container.Env {
		if e.ValueFrom != nil {
			t.Fatalf("%s: env %s: valueFrom is not imitated here", p.file, e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	return env
}

// clusterServeArgs are the flags the test's API server shares with the
// static pod's server (they serve the same Services from the same etcd).
func clusterServeArgs(pods []*manifestPod) []string {
	var out []string
	for _, p := range pods {
		if p.kind != "Pod" {
			continue
		}
		for _, flag := range []string{"--service-cluster-ip-range", "--allocator", "--etcd-prefix"} {
			if v, ok := flagValue(p.container.Args, flag); ok {
				out = append(out, flag+"="+v)
			}
		}
	}
	return out
}

// workloadManifests are the files under deploy/ (relative to it) that hold
// a Pod, Job or CronJob; each must hold nothing else.
func workloadManifests(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(deployDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(deployDir, path)
		docs, workloads := 0, 0
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if tm.Kind == "" {
				continue
			}
			docs++
			if slices.Contains([]string{"Pod", "Job", "CronJob", "Deployment", "DaemonSet", "StatefulSet"}, tm.Kind) {
				workloads++
			}
		}
		if workloads > 0 {
			if docs != 1 {
				return fmt.Errorf("%s: a workload shares its file with %d other objects; give it a file of its own", rel, docs-1)
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("deploy/ holds no workload")
	}
	return files
}

// permissionError is the first line of log that reports a file or
// operation refused for lack of permission, or "".
func permissionError(log string) string {
	for _, line := range strings.Split(log, "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "permission denied") || strings.Contains(l, "operation not permitted") || strings.Contains(l, "read-only file system") {
			return line
		}
	}
	return ""
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
