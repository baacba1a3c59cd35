package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// manifestPod is the one container a manifest of deploy/ runs, with what
// the kubelet and the container runtime derive from the manifest and the
// image before it starts: who it runs as, and what it runs.
type manifestPod struct {
	file      string // relative to deploy/
	kind      string // Pod, Job, CronJob or Deployment
	spec      corev1.PodSpec
	container corev1.Container
	image     imageConfig
	identity  podIdentity
	// argv is the image's entrypoint (or the container's command) followed
	// by the container's args, as the runtime executes them.
	argv []string
}

// podIdentity is the process's credentials as the runtime sets them.
type podIdentity struct {
	uid, gid uint32
	// groups are the supplementary groups: the pod's fsGroup and
	// supplementalGroups (the kubelet adds both).
	groups []uint32
	// fsGroup, when set, is the group the kubelet gives the files of
	// Secret (and other) volumes.
	fsGroup *int64
}

func (id podIdentity) String() string {
	return fmt.Sprintf("uid %d, gid %d, groups %v", id.uid, id.gid, id.groups)
}

// imageConfig is what the Dockerfile's final stage sets for the container:
// its default user and its entrypoint.
type imageConfig struct {
	uid, gid   uint32
	entrypoint []string
}

// distrolessPasswd and distrolessGroup are /etc/passwd and /etc/group of
// gcr.io/distroless/static-debian12:nonroot, the Dockerfile's base: the
// runtime reads them for a uid's primary gid and HOME.
const (
	distrolessPasswd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	distrolessGroup = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
)

// imageUser is uid's primary gid and home directory in the image's
// /etc/passwd; a uid it does not list gets gid 0 and HOME /, as with
// containerd.
func imageUser(uid uint32) (gid uint32, home string) {
	for _, line := range strings.Split(distrolessPasswd, "\n") {
		f := strings.Split(line, ":")
		if len(f) == 7 && f[2] == strconv.FormatUint(uint64(uid), 10) {
			g, _ := strconv.ParseUint(f[3], 10, 32)
			return uint32(g), f[5]
		}
	}
	return 0, "/"
}

// readImageConfig reads USER and ENTRYPOINT of the Dockerfile's last stage.
// USER must be numeric (uid:gid), as the kubelet's runAsNonRoot check needs
// it to be.
func readImageConfig(t *testing.T, path string) imageConfig {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var img imageConfig
	user := ""
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM": // a new stage starts from its base's defaults
			img, user = imageConfig{}, ""
		case "USER":
			user = fields[1]
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(strings.TrimSpace(line[len(fields[0]):])), &img.entrypoint); err != nil {
				t.Fatalf("%s: ENTRYPOINT is not an exec-form JSON array: %v", path, err)
			}
		}
	}
	uid, gid, ok := strings.Cut(user, ":")
	u, uerr := strconv.ParseUint(uid, 10, 32)
	g, gerr := strconv.ParseUint(gid, 10, 32)
	if !ok || uerr != nil || gerr != nil || len(img.entrypoint) == 0 {
		t.Fatalf("%s: the last stage needs USER uid:gid (numeric) and an ENTRYPOINT; got USER %q, ENTRYPOINT %q", path, user, img.entrypoint)
	}
	img.uid, img.gid = uint32(u), uint32(g)
	return img
}

// readManifestPod parses dir/file, a Pod, Job, CronJob or Deployment with one
// container, and resolves its identity as the kubelet does; it fails the
// test where the kubelet would refuse to start the container.
func readManifestPod(t *testing.T, dir, file string, img imageConfig) *manifestPod {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	p := &manifestPod{file: file, kind: tm.Kind, image: img}
	switch tm.Kind {
	case "Pod":
		var pod corev1.Pod
		err = yaml.UnmarshalStrict(data, &pod)
		p.spec = pod.Spec
	case "Job":
		var job batchv1.Job
		err = yaml.UnmarshalStrict(data, &job)
		p.spec = job.Spec.Template.Spec
	case "CronJob":
		var cj batchv1.CronJob
		err = yaml.UnmarshalStrict(data, &cj)
		p.spec = cj.Spec.JobTemplate.Spec.Template.Spec
	case "Deployment":
		var d appsv1.Deployment
		err = yaml.UnmarshalStrict(data, &d)
		p.spec = d.Spec.Template.Spec
	default:
		t.Fatalf("%s: kind %q: only Pod, Job, CronJob and Deployment are read here", file, tm.Kind)
	}
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(p.spec.Containers) != 1 || len(p.spec.InitContainers) != 0 {
		t.Fatalf("%s: %d containers, %d init containers; this test starts exactly one container", file, len(p.spec.Containers), len(p.spec.InitContainers))
	}
	p.container = p.spec.Containers[0]
	p.argv = append(slices.Clone(img.entrypoint), p.container.Args...)
	if len(p.container.Command) > 0 {
		p.argv = append(slices.Clone(p.container.Command), p.container.Args...)
	}
	p.identity, err = resolveIdentity(p.spec.SecurityContext, p.container.SecurityContext, img)
	if err != nil {
		t.Fatalf("%s: the kubelet would not start the container: %v", file, err)
	}
	return p
}

// resolveIdentity is the uid, gid and groups the container runs with: the
// container's securityContext over the pod's over the image's USER, the
// pod's fsGroup and supplementalGroups as supplementary groups. Like the
// kubelet, it refuses runAsNonRoot with uid 0.
func resolveIdentity(pod *corev1.PodSecurityContext, ctr *corev1.SecurityContext, img imageConfig) (podIdentity, error) {
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if ctr == nil {
		ctr = &corev1.SecurityContext{}
	}
	pick := func(c, p *int64) *int64 {
		if c != nil {
			return c
		}
		return p
	}
	id := podIdentity{uid: img.uid, gid: img.gid, fsGroup: pod.FSGroup}
	uidSet := pick(ctr.RunAsUser, pod.RunAsUser)
	if uidSet != nil && uint32(*uidSet) != img.uid {
		// A uid without a gid takes the gid the image's /etc/passwd gives it.
		id.uid = uint32(*uidSet)
		id.gid, _ = imageUser(id.uid)
	}
	if g := pick(ctr.RunAsGroup, pod.RunAsGroup); g != nil {
		id.gid = uint32(*g)
	}
	nonRoot := ctr.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = pod.RunAsNonRoot
	}
	if nonRoot != nil && *nonRoot && id.uid == 0 {
		if uidSet != nil {
			return id, fmt.Errorf("container's runAsUser breaks non-root policy")
		}
		return id, fmt.Errorf("container has runAsNonRoot and image will run as root")
	}
	for _, g := range append([]int64{ptrValue(pod.FSGroup, -1)}, pod.SupplementalGroups...) {
		if g >= 0 && !slices.Contains(id.groups, uint32(g)) {
			id.groups = append(id.groups, uint32(g))
		}
	}
	return id, nil
}

func ptrValue[T any](p *T, otherwise T) T {
	if p == nil {
		return otherwise
	}
	return *p
}

// flagValue is the value of --name in args (--name=v or --name v).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
		if a == name && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// replaceFlag returns args with the value of --name replaced by
// fn(old value); args without the flag are returned as they are.
func replaceFlag(args []string, name string, fn func(string) string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			out[i] = name + "=" + fn(v)
		} else if a == name && i+1 < len(out) {
			out[i+1] = fn(out[i+1])
		}
	}
	return out
}

// runtimeDefaultCaps is containerd's (and CRI-O's) default capability set
// for a container, by name, with the numbers of linux/capability.h.
var runtimeDefaultCaps = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7,
	"SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18, "MKNOD": 27,
	"AUDIT_WRITE": 29, "SETFCAP": 31,
}

// containerCaps is the bounding set of the container: the runtime's
// default set, less the manifest's drop, plus its add.
func containerCaps(sc *corev1.SecurityContext) ([]uint, error) {
	keep := map[string]bool{}
	for name := range runtimeDefaultCaps {
		keep[name] = true
	}
	if sc != nil && sc.Capabilities != nil {
		for _, c := range sc.Capabilities.Drop {
			name := strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
			if name == "ALL" {
				clear(keep)
			}
			delete(keep, name)
		}
		for _, c := range sc.Capabilities.Add {
			name := strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
			if _, ok := runtimeDefaultCaps[name]; !ok {
				return nil, fmt.Errorf("capability %s is not imitated here", c)
			}
			keep[name] = true
		}
	}
	var caps []uint
	for name := range keep {
		caps = append(caps, runtimeDefaultCaps[name])
	}
	slices.Sort(caps)
	return caps, nil
}

// capMask is caps as a bit mask, as /proc shows sets.
func capMask(caps []uint) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << c
	}
	return m
}
