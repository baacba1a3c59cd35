// Command parity sends the parity corpus (internal/parity) to a running
// server and writes what it answered as a record: hack/capture-parity.sh
// runs it against a real kube-apiserver to write testdata/parity/.
//
//	parity --kubeconfig FILE --family v4|v6|v4v6|v6v4 --out FILE --source TEXT
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/allocator/allocator/internal/parity"
	"github.com/allocator/allocator/pkg/model"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "parity:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the server to send the corpus to")
	family := flag.String("family", "", "family configuration the server runs with: v4, v6, v4v6 or v6v4")
	out := flag.String("out", "", "record to write")
	source := flag.String("source", "", "what answered, for the record")
	command := flag.String("command", "hack/capture-parity.sh", "how to capture the record again, for the record")
	modelFlag := flag.String("model", model.IPAddress.String(), "allocator model of the server (which cases run)")
	flag.Parse()
	if *kubeconfig == "" || *family == "" || *out == "" {
		return fmt.Errorf("--kubeconfig, --family and --out are required")
	}
	fam, err := parity.FamilyNamed(*family)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	target, err := parity.NewTarget(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cases := parity.Corpus(fam)
	start := time.Now()
	m, err := model.Parse(*modelFlag, false)
	if err != nil {
		return err
	}
	results, err := parity.Run(ctx, target, cases, m, nil)
	if err != nil {
		return err
	}
	rec := &parity.Record{Source: *source, Command: *command, Family: fam.Name, ServiceRange: fam.ServiceRange, Cases: results}
	if err := rec.Save(*out); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%s: %d cases, %d requests in %s\n", *out, len(results), parity.Requests(cases), time.Since(start).Round(time.Millisecond))
	return nil
}
