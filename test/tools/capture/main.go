// Command capture writes an etcd fixture in the format of testdata/README.md
// from a running etcd and the kube-apiserver that wrote it: the values of
// the Service-allocation keys exactly as stored, and the "expect" section
// read through the kube-apiserver's API (never computed from the values, so
// the fixture tests compare two independent views).
//
// It is used by hack/capture-fixture.sh; it reads only, from loopback.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allocator/allocator/internal/fixtures"
)

// capturedPrefixes are the key prefixes (below the etcd prefix) a fixture keeps.
var capturedPrefixes = []string{"/ranges/", "/services/specs/", "/ipaddresses/", "/servicecidrs/", "/namespaces/"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "capture:", err)
		os.Exit(1)
	}
}

func run() error {
	etcdURL := flag.String("etcd-servers", "", "etcd client URL (loopback)")
	prefix := flag.String("etcd-prefix", "/registry", "etcd prefix of the kube-apiserver")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the kube-apiserver that wrote the data")
	source := flag.String("source", "", "what wrote the data (free text, stored as source)")
	bitmapRange := flag.String("bitmap-range", "", "the range of /ranges/serviceips when the writer dual-writes it (sets expect.bitmaps)")
	var notes multi
	flag.Var(&notes, "note", "a note for expect.notes (repeatable)")
	out := flag.String("out", "", "output file")
	flag.Parse()
	if *etcdURL == "" || *kubeconfig == "" || *out == "" {
		return fmt.Errorf("--etcd-servers, --kubeconfig and --out are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	f := fixtures.File{Source: *source, EtcdPrefix: *prefix}
	// The API view first: kubectl's view "just before the capture".
	ex, err := readExpect(ctx, *kubeconfig)
	if err != nil {
		return err
	}
	ex.Notes = notes
	if *bitmapRange != "" {
		b, err := expectBitmap(*bitmapRange, ex.Services)
		if err != nil {
			return err
		}
		ex.Bitmaps = map[string]fixtures.Bitmap{*prefix + "/ranges/serviceips": b}
	}
	f.Expect = ex

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	for _, p := range capturedPrefixes {
		resp, err := cli.Get(ctx, *prefix+p, clientv3.WithPrefix())
		if err != nil {
			return fmt.Errorf("read %s: %w", *prefix+p, err)
		}
		for _, e := range resp.Kvs {
			f.KVs = append(f.KVs, fixtures.KV{Key: string(e.Key), Value: e.Value, ModRevision: e.ModRevision})
		}
	}
	slices.SortFunc(f.KVs, func(a, b fixtures.KV) int { return strings.Compare(a.Key, b.Key) })

	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return fmt.Errorf("encode fixture: %w", err)
	}
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write fixture: %w", err)
	}
	fmt.Fprintf(os.Stderr, "capture: %d kvs written to %s\n", len(f.KVs), *out)
	return nil
}

func readExpect(ctx context.Context, kubeconfig string) (fixtures.Expect, error) {
	ex := fixtures.Expect{Services: map[string][]string{}, IPAddresses: map[string]fixtures.IPAddress{}, ServiceCIDRs: map[string]fixtures.ServiceCIDR{}}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return ex, fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ex, fmt.Errorf("client: %w", err)
	}
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return ex, fmt.Errorf("list services: %w", err)
	}
	for _, s := range svcs.Items {
		ex.Services[s.Namespace+"/"+s.Name] = s.Spec.ClusterIPs
	}
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ex, fmt.Errorf("list namespaces: %w", err)
	}
	for _, n := range nss.Items {
		ex.Namespaces = append(ex.Namespaces, n.Name)
	}
	slices.Sort(ex.Namespaces)
	ips, err := c.NetworkingV1().IPAddresses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ex, fmt.Errorf("list ipaddresses: %w", err)
	}
	for _, ip := range ips.Items {
		var ref string
		if p := ip.Spec.ParentRef; p != nil {
			ref = strings.Join([]string{p.Group, p.Resource, p.Namespace, p.Name}, "/")
		}
		ex.IPAddresses[ip.Name] = fixtures.IPAddress{ParentRef: ref, Labels: ip.Labels}
	}
	cidrs, err := c.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ex, fmt.Errorf("list servicecidrs: %w", err)
	}
	for _, sc := range cidrs.Items {
		var ready *string
		for _, cond := range sc.Status.Conditions {
			if cond.Type == networkingv1.ServiceCIDRConditionReady {
				s := string(cond.Status)
				ready = &s
			}
		}
		fin := sc.Finalizers
		if fin == nil {
			fin = []string{}
		}
		ex.ServiceCIDRs[sc.Name] = fixtures.ServiceCIDR{CIDRs: sc.Spec.CIDRs, Finalizers: fin, ReadyCondition: ready}
	}
	return ex, nil
}

// expectBitmap lists the Service IPs inside rng with their bit indexes
// (address - network - 1), sorted by index.
func expectBitmap(rng string, services map[string][]string) (fixtures.Bitmap, error) {
	p, err := netip.ParsePrefix(rng)
	if err != nil {
		return fixtures.Bitmap{}, fmt.Errorf("--bitmap-range: %w", err)
	}
	type slot struct {
		index int
		ip    string
	}
	var slots []slot
	for _, ips := range services {
		for _, s := range ips {
			if s == corev1.ClusterIPNone {
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil || !a.Is4() || !p.Contains(a) {
				continue
			}
			n, v := p.Masked().Addr().As4(), a.As4()
			base := uint32(n[0])<<24 | uint32(n[1])<<16 | uint32(n[2])<<8 | uint32(n[3])
			x := uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
			slots = append(slots, slot{int(x - base - 1), s})
		}
	}
	slices.SortFunc(slots, func(a, b slot) int { return a.index - b.index })
	b := fixtures.Bitmap{Range: rng}
	for _, s := range slots {
		b.BitIndexes = append(b.BitIndexes, s.index)
		b.IPs = append(b.IPs, s.ip)
	}
	return b, nil
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, "; ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
