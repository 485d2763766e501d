package unit

import "strconv"

// Error is a validation error; it names the unit, the option and what is wrong.
type Error struct {
	Unit    string // unit name, when known
	Section string // e.g. "Service"
	Option  string // e.g. "ExecStart"
	Field   string // for errors not about a file option
	Msg     string
}

func (e *Error) Error() string {
	s := ""
	if e.Unit != "" {
		s = e.Unit + ": "
	}
	switch {
	case e.Section != "" && e.Option != "":
		s += "[" + e.Section + "] " + e.Option + "=: "
	case e.Section != "":
		s += "[" + e.Section + "]: "
	case e.Field != "":
		s += e.Field + ": "
	}
	return s + e.Msg
}

func quote(s string) string { return strconv.Quote(s) }
