package api

import (
	"net/http"

	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/unit"
)

// mayRun refuses, with 403 naming the option, a change whose unit file the
// request's token may not submit (auth.CheckUnits: root, privilege, a
// User= outside the token's --run-as). Without --acl it allows all.
func mayRun(w http.ResponseWriter, r *http.Request, changes []engine.Change) bool {
	files := make([]*unit.File, 0, len(changes))
	for _, c := range changes {
		if c.File != nil {
			files = append(files, c.File)
		}
	}
	if err := auth.CheckUnits(r.Context(), files...); err != nil {
		refuse(w, r, http.StatusForbidden, "forbidden", err.Error())
		return false
	}
	return true
}
