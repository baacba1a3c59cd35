package parity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/go-cmp/cmp"
)

// Record is what one server answered to the corpus in one family
// configuration.
type Record struct {
	// Source says which server answered, and how it was started.
	Source string `json:"source"`
	// Command is how to capture the record again.
	Command string `json:"command"`
	// Family is the family configuration's name, ServiceRange its
	// --service-cluster-ip-range.
	Family       string       `json:"family"`
	ServiceRange string       `json:"serviceRange"`
	Cases        []CaseRecord `json:"cases"`
}

// CaseRecord is the answers to one case.
type CaseRecord struct {
	Name    string   `json:"name"`
	Results []Result `json:"results"`
}

// Result is one answer, reduced to what a client can rely on.
type Result struct {
	Request  string         `json:"request"`
	Code     int            `json:"code"`
	Reason   string         `json:"reason,omitempty"`
	Message  string         `json:"message,omitempty"`
	Causes   []Cause        `json:"causes,omitempty"`
	Warnings []string       `json:"warnings,omitempty"`
	Object   map[string]any `json:"object,omitempty"`
	// Deliberate, in a record, marks upstream's answer as one we differ
	// from on purpose, and holds ours.
	Deliberate *Deliberate `json:"deliberate,omitempty"`
}

// Cause is one field error of a failed request.
type Cause struct {
	Type    string `json:"type,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message,omitempty"`
}

// Load reads a record written by Save.
func Load(path string) (*Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read parity record: %w", err)
	}
	var r Record
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decode parity record %s: %w", path, err)
	}
	return &r, nil
}

// Save writes the record as indented JSON, one stable layout so a new
// capture diffs well against the old one.
func (r *Record) Save(path string) error {
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return fmt.Errorf("encode parity record: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write parity record: %w", err)
	}
	return nil
}

// Difference is one case whose answers differ from the record.
type Difference struct {
	Case string
	// Stale is set when the corpus no longer sends what the record answers.
	Stale bool
	Diff  string
}

// Compare returns the cases of got that differ from want (the record).
// Results go through JSON first so both sides hold the same value types.
func Compare(want, got []CaseRecord) []Difference {
	byName := make(map[string]CaseRecord, len(want))
	for _, c := range want {
		byName[c.Name] = c
	}
	var diffs []Difference
	for _, g := range got {
		w, ok := byName[g.Name]
		if !ok {
			diffs = append(diffs, Difference{Case: g.Name, Stale: true, Diff: "case not in the record"})
			continue
		}
		if len(w.Results) != len(g.Results) {
			diffs = append(diffs, Difference{Case: g.Name, Stale: true, Diff: fmt.Sprintf("record has %d results, corpus sent %d", len(w.Results), len(g.Results))})
			continue
		}
		stale := false
		for i := range w.Results {
			if w.Results[i].Request != g.Results[i].Request {
				stale = true
				diffs = append(diffs, Difference{Case: g.Name, Stale: true, Diff: fmt.Sprintf("step %d: record answers %q, corpus sent %q", i, w.Results[i].Request, g.Results[i].Request)})
				break
			}
		}
		if stale {
			continue
		}
		wr, gr := roundTrip(w.Results), roundTrip(g.Results)
		for i := range wr {
			if d := wr[i].Deliberate; d != nil {
				wr[i] = Result{Request: wr[i].Request, Code: d.Code, Reason: d.Reason}
				gr[i] = Result{Request: gr[i].Request, Code: gr[i].Code, Reason: gr[i].Reason}
			}
		}
		if d := cmp.Diff(wr, gr); d != "" {
			diffs = append(diffs, Difference{Case: g.Name, Diff: d})
		}
	}
	return diffs
}

func roundTrip(rs []Result) []Result {
	data, err := json.Marshal(rs)
	if err != nil {
		panic(fmt.Sprintf("parity: results do not encode: %v", err))
	}
	var out []Result
	if err := json.Unmarshal(data, &out); err != nil {
		panic(fmt.Sprintf("parity: results do not decode: %v", err))
	}
	return out
}
