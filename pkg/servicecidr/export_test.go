package servicecidr

// Syncs returns how many syncs the controller has run.
func (c *Controller) Syncs() int64 { return c.syncs.Load() }

// Covered exposes covered to the tests.
var Covered = covered
var FamilySelector = familySelector
