package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummarize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in   string
		wantFailed bool
		want       string
	}{{
		name: "passing run: the package lines only, slowest first, subtests left out",
		in: `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"pass","Package":"p","Test":"TestA/sub","Elapsed":9}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}
{"Action":"pass","Package":"p","Test":"TestB","Elapsed":3}
{"Action":"output","Package":"p","Output":"ok  \tp\t4.6s\n"}
{"Action":"pass","Package":"p","Elapsed":4.6}
{"Action":"output","Package":"q","Output":"?   \tq\t[no test files]\n"}
{"Action":"skip","Package":"q"}
`,
		want: "ok  \tp\t4.6s\n?   \tq\t[no test files]\n" +
			"\nslowest packages:\n     4.6s  p\n" +
			"\nslowest tests:\n     3.0s  p TestB\n     1.5s  p TestA\n",
	}, {
		name: "a failed test fails the run, is marked, and its output and its package's are printed",
		in: `{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: boom\n"}
{"Action":"output","Package":"p","Test":"TestB","Output":"=== RUN   TestB\n"}
{"Action":"pass","Package":"p","Test":"TestB","Elapsed":0}
{"Action":"fail","Package":"p","Test":"TestA","Elapsed":2}
{"Action":"output","Package":"p","Output":"FAIL\tp\t2.1s\n"}
{"Action":"fail","Package":"p","Elapsed":2.1}
`,
		wantFailed: true,
		want: "=== RUN   TestA\n    a_test.go:9: boom\nFAIL\tp\t2.1s\n" +
			"\nslowest packages:\n     2.1s  p (failed)\n" +
			"\nslowest tests:\n     2.0s  p TestA (failed)\n     0.0s  p TestB\n",
	}, {
		name:       "a build failure printed as text fails the run",
		in:         "# p\n./x.go:1: syntax error\n",
		wantFailed: true,
		want:       "# p\n./x.go:1: syntax error\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := summarize(strings.NewReader(tc.in), &out, 2)
			if err != nil {
				t.Fatal(err)
			}
			if failed != tc.wantFailed {
				t.Errorf("failed = %v, want %v", failed, tc.wantFailed)
			}
			if diff := cmp.Diff(tc.want, out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}
