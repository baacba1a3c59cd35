package repair

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/allocator/allocator/pkg/repair/report"
)

// Findings are the problems a layer finds in one pass, with the Service each
// one is about. Finish commits the pass and only then counts them and
// records their events, so a pass rerun after a lost write reports nothing
// twice.
type Findings[K Key] struct {
	found []finding[K]
}

type finding[K Key] struct {
	svc     *corev1.Service // nil: no event
	problem report.Problem
	// missing: the finding is Hold's Missing for key, dropped when Commit
	// finds the key was not missing after all.
	missing bool
	key     K
}

// Add records p, found on svc (nil for a finding about no Service, such as
// a leak). A finding with a Service and a Reason raises an event.
func (f *Findings[K]) Add(svc *corev1.Service, p report.Problem) {
	f.found = append(f.found, finding[K]{svc: svc, problem: p})
}

// AddMissing records p, the finding for k that Hold found Missing on svc.
// Finish drops it when Commit reports k NotMissing.
func (f *Findings[K]) AddMissing(svc *corev1.Service, k K, p report.Problem) {
	f.found = append(f.found, finding[K]{svc: svc, problem: p, missing: true, key: k})
}

// Problems returns the findings' problems in the order they were added.
func (f *Findings[K]) Problems() []report.Problem {
	var out []report.Problem
	for _, x := range f.found {
		out = append(out, x.problem)
	}
	return out
}

// Reporting is where Finish sends the findings of a committed pass.
type Reporting struct {
	// DryRun: commit nothing, count nothing, record nothing.
	DryRun bool
	// Metrics counts the problems: a node-port one (Resource
	// ResourceNodePort) on the node-port counters, any other on the
	// ClusterIP ones; nil counts nothing.
	Metrics *report.Metrics
	// Recorder receives the events, as Warnings; nil records none.
	Recorder record.EventRecorder
}

// Finished is what a pass left: its problems, the keys its map holds, and
// whether it wrote the map.
type Finished struct {
	Problems  []report.Problem
	Allocated int
	Wrote     bool
}

// Finish ends the pass once Leaks has walked it: unless to.DryRun, it
// commits, drops the Missing findings of keys Commit found not missing (set
// since the pass's read by the allocation that stored their Service, or
// their Service deleted since the list: not a fault), counts the problems
// left and records their events. A commit error is returned as it is, with
// nothing counted or recorded; a bitmap.ErrConflict means the map is to be
// passed over again (Rounds.Lost).
func (p *Pass[K]) Finish(ctx context.Context, f *Findings[K], to Reporting) (Finished, error) {
	done := Finished{Allocated: p.Allocated()}
	if to.DryRun {
		done.Problems = f.Problems()
		return done, nil
	}
	res, err := p.Commit(ctx)
	if err != nil {
		return Finished{}, err
	}
	done.Wrote = res.Wrote
	kept := slices.DeleteFunc(slices.Clone(f.found), func(x finding[K]) bool { return x.missing && res.NotMissing[x.key] })
	for _, x := range kept {
		done.Problems = append(done.Problems, x.problem)
		if x.problem.Resource == ResourceNodePort {
			to.Metrics.ObservePortProblem(x.problem)
		} else {
			to.Metrics.ObserveProblem(x.problem)
		}
	}
	if to.Recorder != nil {
		for _, x := range kept {
			if x.svc != nil && x.problem.Reason != "" {
				to.Recorder.Event(x.svc, corev1.EventTypeWarning, x.problem.Reason, x.problem.Message)
			}
		}
	}
	return done, nil
}
