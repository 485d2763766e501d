package auth

import (
	"fmt"
	"net/http"
	"strings"
)

// Role is what an API token may do. Each role includes the ones below it.
type Role int

// The roles, from least to most.
const (
	// RoleNone: requests that need no token (the dashboard's static
	// files, the first ACL bootstrap).
	RoleNone Role = iota
	// RoleRead: lists, status, cat, journal, state, events, metrics.
	RoleRead
	// RoleWrite: also submit, load, start, stop, unload, destroy, restart,
	// set-metadata, drain.
	RoleWrite
	// RoleAdmin: also the scheduler's settings and the tokens.
	RoleAdmin
)

var roleNames = []string{"none", "read", "write", "admin"}

func (r Role) String() string {
	if r >= 0 && int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// ParseRole returns the token role named s: read, write or admin.
func ParseRole(s string) (Role, error) {
	switch s {
	case "read":
		return RoleRead, nil
	case "write":
		return RoleWrite, nil
	case "admin":
		return RoleAdmin, nil
	}
	return RoleNone, fmt.Errorf("role %q: want read, write or admin", s)
}

// Required returns the role a request to the API needs, by its method and
// path. What is not a read needs at least RoleWrite; the scheduler's
// settings and the ACL need RoleAdmin.
func Required(method, path string) Role {
	switch {
	case path == "/v1/acl/bootstrap":
		return RoleNone // refused by the store once done
	case strings.HasPrefix(path, "/v1/acl/"):
		return RoleAdmin
	case path == "/" || path == "/ui" || strings.HasPrefix(path, "/ui/"):
		return RoleNone
	}
	switch method {
	case http.MethodGet, http.MethodHead:
		return RoleRead
	}
	if path == "/v1/plan" {
		return RoleRead // changes nothing
	}
	if path == "/v1/scheduler" || strings.HasPrefix(path, "/v1/config/") || strings.HasPrefix(path, "/v1/machines/") && strings.HasSuffix(path, "/enroll") {
		return RoleAdmin
	}
	return RoleWrite
}
