package report

// Progress is how far a long run (a full IPAddress repair pass, a
// migration) has come. Add counts units done; Stop ends the run (called
// once, also when it stops part-way).
type Progress interface {
	Add(n int)
	Stop()
}

// StartProgress starts a Progress over total units of what ("IPAddresses",
// "bits"). A nil StartProgress reports nothing; the CLI passes
// internal/progress.Writer.
type StartProgress func(what string, total int) Progress

// Start calls f, or returns a Progress that reports nothing when f is nil.
func (f StartProgress) Start(what string, total int) Progress {
	if f == nil {
		return silent{}
	}
	return f(what, total)
}

type silent struct{}

func (silent) Add(int) {}
func (silent) Stop()   {}
