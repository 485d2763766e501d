package unit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Update is the [X-Update] section of a template (or of a unit of its
// own): how the leader rolls a change of its file onto the instances
// that run it, as a deployment. Every field has a default, so a file
// without the section is rolled with DefaultUpdate.
type Update struct {
	// MaxParallel is how many instances may be changing (replaced and
	// not yet healthy) at once: the deployment never leaves fewer than
	// the count minus MaxParallel healthy.
	MaxParallel int
	// MinHealthyTime is how long a replaced instance must stay healthy
	// to count as done.
	MinHealthyTime time.Duration
	// HealthyDeadline fails the deployment when a replaced instance is
	// not healthy (for MinHealthyTime) this long after it was replaced.
	HealthyDeadline time.Duration
	// ProgressDeadline fails the deployment when no instance becomes done
	// for this long.
	ProgressDeadline time.Duration
	// Canary instances of the new file run beside the old ones first; the
	// rest waits for a promotion (flotilla deployment promote), or for
	// them to be healthy with AutoPromote.
	Canary      int
	AutoPromote bool
	// AutoRevert rolls a failed deployment back to the last version whose
	// deployment succeeded.
	AutoRevert bool
	// Stagger is the least time between two instances being replaced.
	Stagger time.Duration
}

// DefaultUpdate is the strategy of a file without [X-Update] (Nomad's
// update block's defaults, for the durations).
var DefaultUpdate = Update{
	MaxParallel:      1,
	MinHealthyTime:   10 * time.Second,
	HealthyDeadline:  5 * time.Minute,
	ProgressDeadline: 10 * time.Minute,
}

// MaxUpdateParallel and MaxCanary bound [X-Update]'s counts.
const (
	MaxUpdateParallel = 10000
	MaxCanary         = 100
)

// UpdateOf is f's strategy: its [X-Update], or DefaultUpdate.
func UpdateOf(f *File) Update {
	if f == nil || f.Update == nil {
		return DefaultUpdate
	}
	return *f.Update
}

// updateOptions are the options of [X-Update].
var updateOptions = []string{"AutoPromote", "AutoRevert", "Canary", "HealthyDeadline", "MaxParallel", "MinHealthyTime", "ProgressDeadline", "Stagger"}

// updateOption applies an option of [X-Update].
func (p *parser) updateOption(o option) error {
	if !knownOption(sectionUpdate, o.name) {
		return p.unknownOption(o)
	}
	if p.f.Update == nil {
		u := DefaultUpdate
		p.f.Update = &u
	}
	u := p.f.Update
	value := strings.TrimSpace(o.value)
	duration := func(into *time.Duration) error {
		d, err := parseDuration(value)
		if err != nil {
			return p.valueError(o, err)
		}
		if d == Infinity || d < 0 {
			return p.errorf(o, "want a finite duration")
		}
		*into = d
		return nil
	}
	count := func(into *int, lo, hi int) error {
		n, err := strconv.Atoi(value)
		if err != nil || n < lo || n > hi {
			return p.errorf(o, "%s: want a count, %d to %d", quote(value), lo, hi)
		}
		*into = n
		return nil
	}
	boolean := func(into *bool) error {
		b, err := parseBool(value)
		if err != nil {
			return p.valueError(o, err)
		}
		*into = b
		return nil
	}
	var err error
	switch o.name {
	case "MaxParallel":
		err = count(&u.MaxParallel, 1, MaxUpdateParallel)
	case "Canary":
		err = count(&u.Canary, 0, MaxCanary)
	case "MinHealthyTime":
		err = duration(&u.MinHealthyTime)
	case "HealthyDeadline":
		err = duration(&u.HealthyDeadline)
	case "ProgressDeadline":
		err = duration(&u.ProgressDeadline)
	case "Stagger":
		err = duration(&u.Stagger)
	case "AutoPromote":
		err = boolean(&u.AutoPromote)
	case "AutoRevert":
		err = boolean(&u.AutoRevert)
	}
	if err != nil {
		return err
	}
	p.keep(o, normalizeSpace(o.value))
	return nil
}

// checkUpdate checks [X-Update] as a whole: a replaced instance must have
// time to be healthy before its deadline.
func (p *parser) checkUpdate() error {
	u := p.f.Update
	if u == nil {
		return nil
	}
	if u.HealthyDeadline != 0 && u.HealthyDeadline <= u.MinHealthyTime {
		return &Error{Unit: p.f.Name, Section: sectionUpdate, Option: "HealthyDeadline",
			Msg: linePrefix(p.lastLine["HealthyDeadline"]) + "must be longer than MinHealthyTime=" + u.MinHealthyTime.String()}
	}
	return nil
}

// OverrideUpdate returns base with the [X-Update] options of opts (option
// name to value, as in a unit file) in place of its own, checked as the
// section is: the section is parsed with base's values written out first
// and opts after them, which win.
func OverrideUpdate(base Update, opts map[string]string) (Update, error) {
	if len(opts) == 0 {
		return base, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[Service]\nExecStart=/bin/true\n[X-Update]\nMaxParallel=%d\nMinHealthyTime=%dms\nHealthyDeadline=%dms\n"+
		"ProgressDeadline=%dms\nCanary=%d\nAutoPromote=%t\nAutoRevert=%t\nStagger=%dms\n",
		base.MaxParallel, base.MinHealthyTime.Milliseconds(), base.HealthyDeadline.Milliseconds(), base.ProgressDeadline.Milliseconds(),
		base.Canary, base.AutoPromote, base.AutoRevert, base.Stagger.Milliseconds())
	for _, k := range sortedKeys(opts) {
		if strings.ContainsAny(k+opts[k], "\n\r") {
			return base, fmt.Errorf("[X-Update] %s=%q: one line each", k, opts[k])
		}
		fmt.Fprintf(&b, "%s=%s\n", k, opts[k])
	}
	f, err := Parse("override.service", []byte(b.String()))
	if err != nil {
		return base, err
	}
	return *f.Update, nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
