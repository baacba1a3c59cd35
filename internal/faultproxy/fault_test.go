package faultproxy

import (
	"testing"
	"time"
)

func TestFaultJudge(t *testing.T) {
	t.Parallel()
	key := [][]byte{[]byte("/fault/")}
	tests := []struct {
		name   string
		fault  Fault
		dir    Direction
		before string
		chunk  string
		want   action
	}{
		{name: "zero fault passes", dir: ToTarget, chunk: "x", want: pass},
		{name: "delay without match", fault: Fault{Delay: time.Second}, dir: FromTarget, chunk: "x", want: delay},
		{name: "other direction passes", fault: Fault{Hold: true, Direction: ToTarget}, dir: FromTarget, chunk: "x", want: pass},
		{name: "same direction", fault: Fault{Hold: true, Direction: FromTarget}, dir: FromTarget, chunk: "x", want: hold},
		{name: "drop before hold before delay", fault: Fault{Drop: true, Hold: true, Delay: time.Second}, dir: ToTarget, chunk: "x", want: drop},
		{name: "hold before delay", fault: Fault{Hold: true, Delay: time.Second}, dir: ToTarget, chunk: "x", want: hold},
		{name: "match inside chunk", fault: Fault{Hold: true, Match: key}, dir: ToTarget, chunk: "put /fault/x", want: hold},
		{name: "no match", fault: Fault{Hold: true, Match: key}, dir: ToTarget, chunk: "put /other/x", want: pass},
		{name: "match across reads", fault: Fault{Hold: true, Match: key}, dir: ToTarget, before: "put /fa", chunk: "ult/x", want: hold},
		{name: "match ends in first byte", fault: Fault{Hold: true, Match: key}, dir: ToTarget, before: "/fault", chunk: "/x", want: hold},
		{name: "match wholly before", fault: Fault{Hold: true, Match: key}, dir: ToTarget, before: "/fault/", chunk: "x", want: pass},
		{
			name:   "short match wholly before, long tail kept",
			fault:  Fault{Hold: true, Match: [][]byte{[]byte("ab"), []byte("0123456789")}},
			dir:    ToTarget,
			before: "xxxab12345",
			chunk:  "z",
			want:   pass,
		},
		{name: "one of several", fault: Fault{Hold: true, Match: [][]byte{[]byte("a"), []byte("/fault/")}}, dir: ToTarget, chunk: "/fault/", want: hold},
		{name: "chunk shorter than match", fault: Fault{Hold: true, Match: key}, dir: ToTarget, before: "/fau", chunk: "l", want: pass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.fault.judge(tt.dir, []byte(tt.before), []byte(tt.chunk)); got != tt.want {
				t.Errorf("judge(%s, %q, %q) = %d, want %d", tt.dir, tt.before, tt.chunk, got, tt.want)
			}
		})
	}
}

func TestAppendTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tail, data string
		n          int
		want       string
	}{
		{tail: "", data: "abcdef", n: 3, want: "def"},
		{tail: "abc", data: "de", n: 4, want: "bcde"},
		{tail: "ab", data: "c", n: 6, want: "abc"},
		{tail: "abc", data: "de", n: 0, want: ""},
	}
	for _, tt := range tests {
		if got := string(appendTail([]byte(tt.tail), []byte(tt.data), tt.n)); got != tt.want {
			t.Errorf("appendTail(%q, %q, %d) = %q, want %q", tt.tail, tt.data, tt.n, got, tt.want)
		}
	}
}
