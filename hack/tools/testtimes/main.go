// Command testtimes reads `go test -json` on stdin, prints what plain (not
// -v) go test would: a line per package, and the output of every test and
// package that failed; then it ends with the slowest packages and
// top-level tests, so that a CI log says where the time of a run went.
//
//	go test -json ./... | go run ./hack/tools/testtimes -top 15
//
// Its exit code is go test's verdict as the stream tells it: 1 when a
// package or test failed, or when a line is not test2json's.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of test2json's output (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64 // seconds
	Output  string
}

// timing is how long one package or test took.
type timing struct {
	name    string
	seconds float64
	failed  bool
}

func main() {
	top := flag.Int("top", 15, "how many of the slowest packages and tests to list")
	flag.Parse()
	failed, err := summarize(os.Stdin, os.Stdout, *top)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testtimes:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

// summarize copies the output of the events in r to w and then lists the
// top slowest packages and top-level tests; it reports whether anything
// failed.
func summarize(r io.Reader, w io.Writer, top int) (bool, error) {
	var packages, tests []timing
	failed := false
	// held is the output of each test, and of each package outside its
	// tests (key: package and ""), until it ends: printed if it failed.
	held := map[[2]string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// go test prints build failures as plain text ahead of the
			// package's events: pass it through, and fail.
			fmt.Fprintln(w, sc.Text())
			failed = true
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch e.Action {
		case "output":
			held[key] = append(held[key], e.Output)
		case "pass", "fail", "skip":
			out := held[key]
			delete(held, key)
			switch {
			case e.Action == "fail":
				for _, line := range out {
					fmt.Fprint(w, line)
				}
			case e.Test == "":
				// A package that passed or has no tests: its summary
				// line, as plain go test prints it.
				for _, line := range out {
					if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "?   ") {
						fmt.Fprint(w, line)
					}
				}
			}
			if e.Action == "skip" {
				continue
			}
			t := timing{seconds: e.Elapsed, failed: e.Action == "fail"}
			failed = failed || t.failed
			switch {
			case e.Test == "":
				t.name = e.Package
				packages = append(packages, t)
			case !strings.Contains(e.Test, "/"):
				t.name = e.Package + " " + e.Test
				tests = append(tests, t)
			}
		}
	}
	// Output of a test binary that died (a panic, a timeout) before it
	// reported an end.
	for _, out := range held {
		for _, line := range out {
			fmt.Fprint(w, line)
		}
	}
	if err := sc.Err(); err != nil {
		return true, fmt.Errorf("read go test -json: %w", err)
	}
	list(w, "slowest packages", packages, top)
	list(w, "slowest tests", tests, top)
	return failed, nil
}

// list prints the n slowest of ts under title.
func list(w io.Writer, title string, ts []timing, n int) {
	if n <= 0 || len(ts) == 0 {
		return
	}
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].seconds > ts[j].seconds })
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, t := range ts[:min(n, len(ts))] {
		mark := ""
		if t.failed {
			mark = " (failed)"
		}
		fmt.Fprintf(w, "%8.1fs  %s%s\n", t.seconds, t.name, mark)
	}
}
