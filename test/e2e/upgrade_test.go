package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/etcdtest"
	"github.com/allocator/allocator/internal/transition"
	"github.com/allocator/allocator/pkg/etcdlayout"
)

// What operators live through: a rolling upgrade of our own
// replicas, and its rollback.
//
// TestRollingUpgrade builds the previous version of this server from git
// and, in each model, starts three replicas of one version on one etcd and
// replaces them one at a time (SIGTERM, start the other version on the same
// data directory) while NodePort Services are created and deleted through
// every serving replica: previous → current (the upgrade) and current →
// previous (the rollback). It checks that no ClusterIP or node port is
// acknowledged or stored for two Services, that every acknowledged create
// is stored with what it was acknowledged with, that with both versions live
// each version's `allocator transition status` lists the other's replica
// records (format version and all) and every replica acts on the same
// transition state, and that one `allocator repair` pass leaves nothing to
// fix.
//
// Leaks before the repair are counted, not failed. In the IPAddress model an
// IPAddress-model replica's start-up carry-over (MigrateToIPAddress, which
// runs at every start) creates the IPAddress of a Service it listed and that
// was deleted, with its IPAddress, before the create: an orphan the repair
// deletes after its grace period, never an address held twice.
//
// The previous version is ALLOCATOR_PREVIOUS_REV (any revision git knows,
// e.g. 57160f0), by default the newest commit of main's history that is
// not HEAD itself: the merge base of HEAD and main (origin/main when there is
// no local main), or HEAD's first parent when HEAD is on main. It is
// extracted with `git archive` and built once per run, at one path under
// the system's temporary directory (previousSourceDir: so Go's build cache
// keeps what the last build there compiled), and the sources are removed
// after the build; nothing is written outside temporary directories but
// Go's own build cache and the path's lock file. Without the history (a shallow
// clone, no git, not a checkout) the test skips, saying why.

const upgradeRange = "10.0.0.0/21"

func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the previous version and starts many server processes")
	}
	previous, rev := buildPreviousVersion(t) // first: it may skip
	current := buildBinary(t)
	versions := map[string]string{previous: "previous " + rev, current: "current"}
	for _, model := range []string{"bitmap", "ipaddress"} {
		t.Run(model+"/upgrade", func(t *testing.T) { testRollingReplace(t, model, previous, current, versions) })
		t.Run(model+"/rollback", func(t *testing.T) { testRollingReplace(t, model, current, previous, versions) })
	}
}

// testRollingReplace starts three replicas of from and replaces them with
// to, one at a time, under load.
func testRollingReplace(t *testing.T, model, from, to string, versions map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	etcd := etcdtest.New(t)
	f := newFleet(t, from, etcd, 3, "--service-cluster-ip-range", upgradeRange)
	f.startAll(model)
	t.Logf("3 %s-model replicas of the %s version serving", model, versions[from])

	l := startOpsLoad(t, f, opsLoadConfig{
		workers: 8, interval: 20 * time.Millisecond, maxDuration: 3 * time.Minute,
		prefix: "svc", deleteEvery: 4, seed: loadSeed(t),
	})
	defer l.halt()
	for _, r := range f.replicas {
		ep := r.serving.Load()
		if !waitFor(45*time.Second, func() bool { return l.ackedVia(ep) >= 5 }) {
			t.Fatalf("%s acknowledged %d creates within 45 s, want 5", ep, l.ackedVia(ep))
		}
	}
	start := time.Now()
	for i, r := range f.replicas {
		old := r.serving.Load()
		t0 := time.Now()
		f.stop(r, syscall.SIGTERM)
		f.bin = to // launches from now on, and the repair job at the end, run the new version
		ep := f.start(r, model)
		t.Logf("%s: %s (%s) → %s (%s) in %s", r.name, old, versions[from], ep, versions[to], time.Since(t0).Round(100*time.Millisecond))
		if !waitFor(45*time.Second, func() bool { return l.ackedVia(ep) >= 15 }) {
			t.Errorf("%s acknowledged %d creates within 45 s, want 15", ep, l.ackedVia(ep))
		}
		if i == 0 {
			// One replica of the new version, two of the old: each
			// version reads the other's records.
			verifyMixedRecords(t, ctx, f, from, to, versions)
		}
	}
	l.halt()
	t.Logf("the three replacements took %s", time.Since(start).Round(time.Second))
	l.summary()

	before := auditClaims(t, ctx, etcd.Client(), model, upgradeRange)
	lost, _ := l.verifyAcks(before)
	reportAudit(t, "before repair", before, true)
	l.explainLeaks(before.leaks)
	t.Logf("FIGURES %s %s → %s: %d duplicate ClusterIPs, %d duplicate node ports, %d acknowledged creates lost, %d leaked and %d missing records before repair",
		model, versions[from], versions[to], len(before.dupIPs), len(before.dupPorts), lost, len(before.leaks), len(before.missing))
	verifyRecords(t, f, 30*time.Second)
	kept := repairOnce(t, f, model)
	after := auditClaims(t, ctx, etcd.Client(), model, upgradeRange)
	reportAudit(t, "after one repair pass", after, kept)
	if t.Failed() {
		t.Logf("replica logs:\n%s", f.logs(40))
	}
}

// verifyMixedRecords checks, with replicas of both versions live, that the
// replica records and the transition state in etcd carry this release's
// format, and that `allocator transition status` of each version lists
// every live replica of both versions, each acting on the stored state.
func verifyMixedRecords(t *testing.T, ctx context.Context, f *fleet, from, to string, versions map[string]string) {
	t.Helper()
	live := f.livePIDs()
	l := etcdlayout.Layout{Prefix: "/registry"}
	resp, err := f.etcd.Client().Get(ctx, l.AllocatorReplicasPrefix(""), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	state, err := f.etcd.Client().Get(ctx, l.AllocatorState())
	if err != nil || len(state.Kvs) != 1 {
		t.Fatalf("transition state: %v, %v", state, err)
	}
	for _, kv := range append(resp.Kvs, state.Kvs...) {
		var raw struct {
			Format int `json:"format"`
			PID    int `json:"pid"`
		}
		if err := json.Unmarshal(kv.Value, &raw); err != nil {
			t.Errorf("%s: %v", kv.Key, err)
			continue
		}
		if raw.Format != transition.Format {
			t.Errorf("%s has format %d, want %d: %s", kv.Key, raw.Format, transition.Format, kv.Value)
		}
	}
	// The status JSON leaves the state's revision out; etcd has it.
	stateRevision := state.Kvs[0].ModRevision
	common := []string{"--etcd-servers", f.endpoints()}
	for _, bin := range []string{from, to} {
		var st transition.Status
		// A replica just started may take a moment to write its record.
		if !waitFor(30*time.Second, func() bool {
			out, _, code := runCLIQuiet(t, bin, append([]string{"transition", "status", "-o", "json"}, common...)...)
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
				return false
			}
			got := map[int]bool{}
			for _, r := range st.Replicas {
				if _, ok := live[r.PID]; ok && r.StateRevision >= stateRevision && r.DualWrite == st.State.DualWrite {
					got[r.PID] = true
				}
			}
			return len(got) == len(live)
		}) {
			t.Errorf("transition status of the %s version: replicas %+v, state %+v (revision %d); want every live process %v acting on the state",
				versions[bin], st.Replicas, st.State, stateRevision, live)
			continue
		}
		var seen []string
		for _, r := range st.Replicas {
			seen = append(seen, fmt.Sprintf("pid %d %s format %d stateRevision %d", r.PID, r.Model, r.Format, r.StateRevision))
		}
		t.Logf("transition status of the %s version lists %d replicas (state %s, revision %d): %s",
			versions[bin], len(st.Replicas), st.State, stateRevision, strings.Join(seen, "; "))
	}
}

// runCLIQuiet runs the allocator binary, at most 2 minutes, and returns its
// stdout, its stdout and stderr interleaved, and its exit code; runCLI is
// the same with a log of the run.
func runCLIQuiet(t *testing.T, bin string, args ...string) (stdout, output string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	all := &lockedBuffer{} // written by the stdout and the stderr copier at once
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, all), all
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), all.String(), code
}

// buildPreviousVersion builds cmd/allocator at the previous revision (see
// the comment at the top) into the test's temporary directory and returns
// the binary and the revision's short name. It skips the test when the git
// history is not there.
func buildPreviousVersion(t *testing.T) (bin, rev string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("rolling upgrade: git not found, so the previous version cannot be built")
	}
	root, err := gitOutput("", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("rolling upgrade: not a git checkout (%v), so the previous version cannot be built", err)
	}
	rev, why := os.Getenv("ALLOCATOR_PREVIOUS_REV"), "ALLOCATOR_PREVIOUS_REV"
	if rev == "" {
		rev, why, err = previousRevision(root)
		if err != nil {
			t.Skipf("rolling upgrade: %v; fetch the history (git fetch --unshallow) or set ALLOCATOR_PREVIOUS_REV", err)
		}
	}
	commit, err := gitOutput(root, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		shallow, _ := gitOutput(root, "rev-parse", "--is-shallow-repository")
		if shallow == "true" || os.Getenv("ALLOCATOR_PREVIOUS_REV") == "" {
			t.Skipf("rolling upgrade: revision %s (%s) is not in this clone's history (shallow: %s); fetch the history (git fetch --unshallow) or set ALLOCATOR_PREVIOUS_REV", rev, why, shallow)
		}
		t.Fatalf("ALLOCATOR_PREVIOUS_REV=%s: not a commit of %s", rev, root)
	}
	short := commit[:min(len(commit), 7)]
	dir := t.TempDir()
	src, release := previousSourceDir(t, dir)
	defer release()
	started := time.Now()
	if err := extractRevision(root, commit, src); err != nil {
		t.Fatalf("extract %s: %v", short, err)
	}
	bin = filepath.Join(dir, "allocator-"+short)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/allocator")
	cmd.Dir = src
	// The previous version builds with this toolchain, never a downloaded
	// one, and outside any go.work.
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the previous version %s: %v\n%s", short, err, out)
	}
	t.Logf("previous version: %s (%s), built in %s", short, why, time.Since(started).Round(time.Second))
	return bin, short
}

// previousSourceDir is where the previous version's sources are extracted
// and built: one path under the system's temporary directory whenever no
// other test holds it (a lock beside it), else a directory under dir. Go's
// build cache keys a package's compilation by its directory, so at one path
// every package the previous version shares with the last one built there
// is not compiled again; at a new path all of them would be. The
// directory does not exist yet when returned (extractRevision makes it);
// release removes it and frees the path.
func previousSourceDir(t *testing.T, dir string) (src string, release func()) {
	t.Helper()
	fixed := filepath.Join(os.TempDir(), "allocator-previous-version")
	if unlock, ok := tryLock(fixed + ".lock"); ok {
		if err := os.RemoveAll(fixed); err == nil {
			return fixed, func() { _ = os.RemoveAll(fixed); unlock() }
		}
		unlock()
	}
	src = filepath.Join(dir, "src")
	return src, func() { _ = os.RemoveAll(src) }
}

// previousRevision is the default previous version: the merge base of HEAD
// and main (or origin/main), or HEAD's first parent when HEAD is on main.
func previousRevision(root string) (rev, why string, err error) {
	head, err := gitOutput(root, "rev-parse", "--verify", "HEAD")
	if err != nil {
		return "", "", fmt.Errorf("no HEAD: %w", err)
	}
	for _, ref := range []string{"main", "origin/main"} {
		if _, err := gitOutput(root, "rev-parse", "--verify", "--quiet", ref+"^{commit}"); err != nil {
			continue
		}
		base, err := gitOutput(root, "merge-base", "HEAD", ref)
		if err != nil {
			return "", "", fmt.Errorf("merge base of HEAD and %s: %w", ref, err)
		}
		if base != head {
			return base, "the merge base of HEAD and " + ref, nil
		}
		return head + "^1", "HEAD's first parent (HEAD is on " + ref + ")", nil
	}
	return head + "^1", "HEAD's first parent (no main branch here)", nil
}

// gitOutput runs git in dir and returns its trimmed standard output.
func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// extractRevision writes the tree of commit into dir (`git archive`, read
// with archive/tar: no tar program needed, and the repository is only read).
func extractRevision(root, commit, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", commit)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	extractErr := untar(pipe, dir)
	_, _ = io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return extractErr
}

func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q is outside the tree", h.Name)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			file, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(file, tr)
			if cerr := file.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		case tar.TypeXGlobalHeader:
			// git archive's pax header with the commit id
		default:
			return fmt.Errorf("archive entry %q: unsupported type %c", h.Name, h.Typeflag)
		}
	}
}
